"""The wire format: request and reply lines, their checks and limits."""

from __future__ import annotations

import json

import pytest

from gputui.link import protocol


def test_request_line_shape():
    line = protocol.request_line(3, "record_sites", {"steps": 20, "on": True})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"v": 1, "id": 3, "op": "record_sites",
                                "params": {"steps": 20, "on": True}}


def test_replies_shape():
    assert json.loads(protocol.ok_reply(4, {"a": 1})) == {"v": 1, "id": 4, "ok": True,
                                                          "result": {"a": 1}}
    assert json.loads(protocol.error_reply(None, "unknown_op", "no such op")) == {
        "v": 1, "id": None, "ok": False, "code": "unknown_op", "error": "no such op"}


def test_a_raw_json_result_is_spliced_in_as_it_is():
    raw = protocol.RawJSON(protocol.dumps({"steps": [{"step": 1}, {"step": 2}], "x": float("nan")}))
    line = protocol.ok_reply("q", raw)
    assert line == b'{"v":1,"id":"q","ok":true,"result":{"steps":[{"step":1},{"step":2}],"x":null}}\n'
    assert json.loads(line)["result"] == {"steps": [{"step": 1}, {"step": 2}], "x": None}


def test_non_finite_numbers_become_null():
    line = protocol.ok_reply(1, {"x": float("inf"), "y": [float("nan"), 2.5], "z": -float("inf")})
    assert b"Infinity" not in line and b"NaN" not in line
    assert json.loads(line)["result"] == {"x": None, "y": [None, 2.5], "z": None}


def test_decode_request_round_trip():
    request = protocol.decode_request(protocol.request_line(9, "report").rstrip(b"\n"))
    assert request == protocol.Request(id=9, op="report", params={})


def test_missing_or_null_params_mean_none():
    assert protocol.decode_request(b'{"v":1,"id":"a","op":"hello"}').params == {}
    assert protocol.decode_request(b'{"v":1,"id":null,"op":"hello","params":null}').params == {}


@pytest.mark.parametrize("line, code, words", [
    (b"{", "bad_json", "not valid JSON"),
    (b"\xc3\x28", "bad_json", "not valid JSON"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "bad_json", "not valid JSON: JSON nested too deeply",
                 id="nested-too-deeply"),
    (b'"report"', "bad_request", "expected a JSON object, got str"),
    (b'{"v":1,"id":1.5,"op":"x"}', "bad_request", "'id' must be an integer or a string"),
    (b'{"v":1,"id":[1],"op":"x"}', "bad_request", "'id' must be an integer or a string"),
    (b'{"v":1,"id":1,"op":""}', "bad_request", "'op' must be a non-empty string"),
    (b'{"v":1,"id":1,"op":5}', "bad_request", "'op' must be a non-empty string"),
    (b'{"v":1,"id":1,"op":"x","params":"rm -rf"}', "bad_request", "'params' must be a JSON object"),
    (b'{"v":"1","id":1,"op":"x"}', "wrong_version", "protocol version \"1\" is not supported"),
    (b'{"v":true,"id":1,"op":"x"}', "wrong_version", "protocol version true is not supported"),
])
def test_bad_requests(line, code, words):
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode_request(line)
    assert caught.value.code == code
    assert words in str(caught.value)


def test_wrong_version_keeps_the_id_for_the_reply():
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode_request(b'{"v":2,"id":17,"op":"report"}')
    assert caught.value.request_id == 17


def test_size_limit():
    big = b'"' + b"a" * protocol.MAX_REQUEST + b'"'
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode_request(big)
    assert caught.value.code == "too_large"
    assert protocol.parse_object(b'{"a":"' + b"b" * 10 + b'"}', limit=20) == {"a": "b" * 10}
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_object(b'{"a":"' + b"b" * 20 + b'"}', limit=20)


def test_reply_limit_is_larger_than_request_limit():
    assert protocol.MAX_REQUEST == 1 << 20
    assert protocol.MAX_REPLY > protocol.MAX_REQUEST
