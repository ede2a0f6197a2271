"""Test script (not a served program): start a session on ``$LOCAL_MODEL``, generate,
return. At exit it reports how many engine threads are still alive; its handler is
registered before mellea is imported, so it runs after mellea's own exit handlers."""

import atexit
import os
import threading


@atexit.register
def report_engine_threads() -> None:
    alive = [t for t in threading.enumerate() if t.name == "mellea-engine" and t.is_alive()]
    print(f"engine threads at exit: {len(alive)}", flush=True)


import mellea  # noqa: E402 (after the handler, on purpose)

session = mellea.start_session(model_id=os.environ["LOCAL_MODEL"])
print("reply:", session.chat("Say hi.", model_options={"max_tokens": 4}).content, flush=True)
