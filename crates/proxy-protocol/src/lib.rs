//! PROXY protocol v1/v2 codec (no I/O, no allocation on the encode path).
