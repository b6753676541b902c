"""The audit thread's room: the fairness audit of a running instance and the recent history
the console draws (``auditor``).
"""
