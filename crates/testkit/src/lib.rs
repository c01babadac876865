//! Test support: loopback port registry and real nginx/HAProxy processes.
