"""The feedback threads' room: what the paid API's workers report (``reader``: the adaptive
rate, pauses, measured cost, credit) and the egress consumer group's lag
(``egress_lag``), each handed to the emitter as a message.
"""
