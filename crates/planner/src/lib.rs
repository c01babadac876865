//! Pure hairpin planner: discovery, hostnames, plan, Corefile and hosts-file editing.
