//! The hairpin TCP proxy that prepends the PROXY header a load balancer would send.
