"""Memory moving in and out: a context's archive (`archive`: export and import in Engram's own format) and the
importers of other systems' exports (`importers`). Above the families' declarations; used by the command line
and by the identity family's transfer tools."""
