"""What the HTTP `handler` transform and the `webhook` sink share.

- `options`: the request options of both node types (url, headers, secret, payload shape, batch size) and how
  they are redacted for display;
- `payloads`: rows → request bodies (payload versions 0 and 1) and response bodies → Arrow;
- `retry`: which failures are retried, backoff with jitter, ``Retry-After``;
- `client`: one event loop and one keep-alive `httpx.AsyncClient` per Python worker process, and `exchange`,
  which sends a partition's requests concurrently and hands back the answers in input order.
"""
