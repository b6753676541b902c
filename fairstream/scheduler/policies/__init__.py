"""The policies thread's room: tenant policies read from the compacted policy topic
(``reader``) and the tenant groups they define (``tenant_groups``), applied by the emitter.
"""
