"""The web endpoints and the console (``server``; static files in ``console/``), run on the
main thread's event loop.
"""
