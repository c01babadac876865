//! Keeps a marked block of hairpin hostnames in a node's hosts file.
