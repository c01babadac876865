//! Kubernetes I/O: watches, plan application, leader election, uninstall.
