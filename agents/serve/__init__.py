"""``gpualloc serve``: the allocator as an HTTP service, with a what-if page (docs/serve.md).

- :mod:`agents.serve.app`: the FastAPI app (:func:`~agents.serve.app.create_app`) and its settings;
- :mod:`agents.serve.bodies`: request bodies, checked by the project's readers with the CLI's words;
- :mod:`agents.serve.work`: what a request computes, in a thread (fast mode) or a worker process (exact mode);
- :mod:`agents.serve.exact`: the exact-mode pool, one worker process per request, bounded, with 429s;
- :mod:`agents.serve.service_metrics`: the Prometheus metrics;
- :mod:`agents.serve.schemas`: the OpenAPI schemas, from the project's own types;
- :mod:`agents.serve.server`: binding, the port file, uvicorn.

FastAPI and uvicorn are the ``serve`` extra (``pip install -e ".[serve]"``); nothing
else in the project imports this package.
"""
