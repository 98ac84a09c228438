"""Request bodies larger than the `max_body_bytes` setting are refused with 413.

Checked twice: against `Content-Length` before anything is read, and while a body without one
(chunked) streams in, so that no request makes the server hold more than the limit. In the
second case the 413 is sent as soon as the limit is passed and the app is told the client went
away, so whatever it answers then is dropped.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunehub.server.api.errors import error_response


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_response(400, "the Content-Length header is not a number")(
                    scope, receive, send
                )
                return
            if int(declared) > self.max_bytes:
                await self._too_large()(scope, receive, send)
                return
        received = 0
        started = refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not started:
                    refused = True
                    await self._too_large()(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counting_receive, guarded_send)

    def _too_large(self) -> ASGIApp:
        return error_response(413, f"the request body is over the limit of {self.max_bytes} bytes")
