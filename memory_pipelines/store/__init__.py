"""agent-mem: projects, memories, fragments, versions and arbitration."""
