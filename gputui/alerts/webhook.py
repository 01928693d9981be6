"""Webhook delivery: each delivery POSTed as its JSON document, a Slack message, or an ntfy message.
Its own module so the monitor loads urllib (and with it ssl) only where a webhook is asked for.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import IO

from gputui.alerts.delivery import TIMEOUT, Delivery


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook's POST is never re-sent elsewhere: a redirect is reported as the failure it is here."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: object, newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def webhook_channel(url: str, form: str = "json", timeout: float = TIMEOUT) -> Callable[[Delivery], None]:
    """POSTs each delivery to ``url``: its JSON document, a Slack `{"text": ...}`, or an ntfy message
    (the text as body, the first alert's title and priority as headers). https is verified (urllib's default)."""

    def send(delivery: Delivery) -> None:
        body, headers = webhook_body(delivery, form)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with _OPENER.open(request, timeout=timeout) as answer:
                answer.read(1 << 16)
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"alert webhook answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RuntimeError(f"alert webhook unreachable: {getattr(exc, 'reason', exc)}") from None

    return send


def webhook_body(delivery: Delivery, form: str) -> tuple[bytes, dict[str, str]]:
    if form == "slack":
        return json.dumps({"text": delivery.text()}).encode(), {"Content-Type": "application/json"}
    if form == "ntfy":
        first = delivery.events[0]
        priority = {"critical": "urgent", "warning": "high"}.get(first.alert.severity, "default")
        title = f"gputui on {delivery.host}: {first.alert.title}"
        # HTTP headers are latin-1: anything else in a title is replaced rather than failing the delivery.
        return delivery.text().encode(), {"Title": title.encode("latin-1", "replace").decode("latin-1"),
                                          "Priority": priority, "Content-Type": "text/plain; charset=utf-8"}
    return json.dumps(delivery.document()).encode(), {"Content-Type": "application/json"}
