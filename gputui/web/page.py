"""The browser view's pages: the one a tab opens (Textual's web client on a full-window terminal), and the one
said when every session is taken.

Everything the page loads comes from this server, by paths relative to the page (so a reverse proxy may put
it under a prefix): textual-serve's client and stylesheet, and its Roboto Mono font instead of the font host
textual-serve's own template asks. The Content-Security-Policy holds the browser to that: nothing from
elsewhere, not even an image, and no script but the client and the page's one line below.
"""

from __future__ import annotations

import base64
import hashlib
import html

# Sets the websocket's address from where the page is, as the browser sees it (scheme, host, a proxy's
# prefix); the client reads it when the page has loaded.
CONNECT = ('document.getElementById("terminal").dataset.sessionWebsocketUrl = '
           '(location.protocol === "https:" ? "wss:" : "ws:") + "//" + location.host + '
           'location.pathname.replace(/[^/]*$/, "") + "ws";')

# The terminal fills the window; when the session ends (the monitor quit, the tab was idle, the server
# stopped), a bar at the bottom says so and offers a new one, leaving the terminal's last words readable
# above it: the server writes there why it closed a session.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="preload" href="static/fonts/RobotoMono-VariableFont_wght.ttf" as="font" type="font/ttf" crossorigin>
<link rel="stylesheet" href="static/css/xterm.css">
<style>
@font-face {{ font-family: "Roboto Mono"; src: url("static/fonts/RobotoMono-VariableFont_wght.ttf"); }}
@font-face {{ font-family: "Roboto Mono"; font-style: italic;
              src: url("static/fonts/RobotoMono-Italic-VariableFont_wght.ttf"); }}
html, body {{ margin: 0; height: 100%; background: #0c181f; overflow: hidden; }}
.textual-terminal {{ position: absolute; inset: 0; opacity: 0; }}
body.-first-byte .textual-terminal {{ opacity: 1; transition: opacity 0.2s ease-out; }}
.ended {{ display: none; position: absolute; left: 0; right: 0; bottom: 0; padding: 8px 16px; z-index: 10;
          font: 15px "Roboto Mono", monospace; color: #fff; background: #5e0ba7; }}
body.-closed .ended {{ display: block; }}
.ended a {{ color: #fff; font-weight: bold; }}
</style>
<script src="static/js/textual.js"></script>
</head>
<body>
<div id="terminal" class="textual-terminal" data-font-size="{font_size}"></div>
<div class="ended">Session ended. <a href="">Open a new one</a></div>
<noscript>gputui's browser view needs JavaScript.</noscript>
<script>{connect}</script>
</body>
</html>
"""

FONT_SIZE = 16
FONT_SIZES = range(6, 49)  # ?fontsize=N, as textual-serve's page takes it (a phone, a wall display)

BUSY = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>{title}: every session is taken</title>
<style>body {{ font: 16px monospace; background: #0c181f; color: #fff; padding: 2em; }}</style></head>
<body>
<h1>Every session is taken</h1>
<p>This gputui web shows {limit} browser {sessions} at once, and all of them are open.
Try again when one closes: a session closes when its tab does, or after {idle} without a key, a click or a
resize.</p>
<p>Whoever runs it can allow more with <code>gputui web --max-sessions N</code>.</p>
</body>
</html>
"""

# Where the page's scripts, styles, fonts and connections may come from: here only.
SECURITY = {
    "Content-Security-Policy": (
        "default-src 'none'; "
        f"script-src 'self' 'sha256-{base64.b64encode(hashlib.sha256(CONNECT.encode()).digest()).decode()}'; "
        "style-src 'self' 'unsafe-inline'; font-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def page(title: str, font_size: int = FONT_SIZE) -> str:
    """A tab's page, titled ``title`` (the host's name: made visible by the caller, escaped here)."""
    size = font_size if font_size in FONT_SIZES else FONT_SIZE
    return PAGE.format(title=html.escape(title), font_size=size, connect=CONNECT)


def busy(title: str, limit: int, idle: str) -> str:
    """The page said when all ``limit`` sessions are taken; ``idle``: after how long an idle one closes."""
    return BUSY.format(title=html.escape(title), limit=limit, sessions="session" if limit == 1 else "sessions",
                       idle=html.escape(idle))
