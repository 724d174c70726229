"""The process: uvicorn over TLS (run), the connection limits uvicorn lacks (protocol, limits),
the heap around the initial sync (heap), memory given back after bursts (memory), the probes'
own port (health) and what runs beside the admissions (housekeeping).

It knows nothing of admission: it starts the app by its factory string (`run.APP_FACTORY`),
and is handed what it serves or watches (the readiness verdict, the transport's counters) as
values and callables. The HTTP edge that uses these pieces is `app.transport`.
"""
