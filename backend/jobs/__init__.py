"""Jobs as records and processes: the store, the reporter, the scheduler, lineage, access and failure sentences."""
