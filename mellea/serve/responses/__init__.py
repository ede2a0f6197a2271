"""The OpenAI Responses API: request and response models, input items, the run, the store,
and the service over them (:mod:`mellea.serve.responses.service`).

Framework-free, like the rest of :mod:`mellea.serve`; the HTTP routes live in
``cli/serve/responses_routes.py`` and call the service.
"""

from mellea.serve.responses.arguments import check_request, new_response, serve_arguments
from mellea.serve.responses.items import chat_messages, input_items
from mellea.serve.responses.objects import ResponseObject
from mellea.serve.responses.replay import replay_events
from mellea.serve.responses.request import ResponsesRequest
from mellea.serve.responses.run import CancelSignal, ResponseRun
from mellea.serve.responses.store import ResponseStore
from mellea.serve.responses.store_api import Store, open_store
from mellea.serve.responses.store_errors import StoreError, StoreUnavailable
from mellea.serve.responses.stored import StoredResponse

__all__ = [
    "CancelSignal",
    "ResponseObject",
    "ResponseRun",
    "ResponseStore",
    "ResponsesRequest",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredResponse",
    "chat_messages",
    "check_request",
    "input_items",
    "new_response",
    "open_store",
    "replay_events",
    "serve_arguments",
]
