"""The trim thread's room: the ingest topic kept to the backlog (``trim``) and the
partitions held by a transaction left open, watched (``held``).
"""
