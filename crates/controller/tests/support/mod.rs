//! Test doubles shared by the controller's integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod cluster;
pub mod controller;
pub mod dns;
