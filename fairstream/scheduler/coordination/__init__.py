"""The group thread's room: instances exchange their demand on the coordination topic and
each sets its share of the group rate (``shares``: the Kafka side; ``view``: the pure
decision; ``fence``: a dead peer's transactional id fenced).
"""
