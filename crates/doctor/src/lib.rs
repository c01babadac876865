//! Diagnoses hairpin traffic: DNS, PROXY-protocol probes, cluster checks; and the echo test server.
