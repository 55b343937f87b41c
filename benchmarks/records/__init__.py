"""What a run writes and reads back: the record kinds, the run folder's store, its manifest read as typed
values, a capacity search's probes."""
