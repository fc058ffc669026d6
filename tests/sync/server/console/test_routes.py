"""The operator console's protection and pages over a real home server on loopback
(httpx, no browser: see test_console_browser.py for what a person sees), and its CLI."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from edgeq import ManualClock, Message, QueueManager
from edgeq.cli import cli
from edgeq.cli.serve import CONSOLE_NICENESS
from edgeq.clock import system_clock
from edgeq.sync import protocol as p
from edgeq.sync.server.app import create_app
from edgeq.sync.server.console.auth import (
    SESSION_MS,
    add_account,
    load_credential,
    remove_account,
    set_password,
)
from edgeq.sync.server.console.login import FIRST_DELAY_MS
from tests.sync.conftest import LiveServer, edgeq_serve_console, free_port

PASSWORD = "operator-pass-1"


@pytest.fixture
def console(home_qm: QueueManager, make_console: Callable[..., LiveServer]) -> LiveServer:
    set_password(home_qm.path, PASSWORD)
    return make_console(home_qm)


def _client(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10, follow_redirects=False)


def _sign_in(client: httpx.Client, url: str = "", password: str = PASSWORD) -> httpx.Response:
    return client.post(url + "/console/login", data={"user": "operator", "password": password})


def test_the_console_is_off_unless_asked_for(server: LiveServer, http: httpx.Client) -> None:
    assert http.get(server.url + "/console").status_code == 404


def test_without_a_session_only_the_sign_in_form_is_served(console: LiveServer) -> None:
    with _client(console) as client:
        page = client.get("/console")
        assert page.status_code == 303 and page.headers["location"] == "/console/login"
        client.cookies.set("edgeq_console", "9999999999999.abc.forged", path="/console")
        assert client.get("/console").status_code == 303
        form = client.get("/console/login")
        assert form.status_code == 200 and 'type="password"' in form.text and "ORDERS" not in form.text
        wrong = _sign_in(client, password="not-the-password")
        assert (wrong.status_code == 403 and "Wrong account name or password" in wrong.text
                and "set-cookie" not in wrong.headers)


def test_a_sign_in_gives_a_strict_http_only_cookie_and_the_page(
    console: LiveServer, home_qm: QueueManager
) -> None:
    home_qm.put("ORDERS", Message(b"x"))
    with _client(console) as client:
        signed = _sign_in(client)
        assert signed.status_code == 303 and signed.headers["location"] == "/console"
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/;" in cookie + ";"
        assert "secure" not in cookie  # plain HTTP on loopback: a Secure cookie would never be sent back
        page = client.get("/console")
        assert page.status_code == 200
        assert 'data-queue="ORDERS"' in page.text and 'http-equiv="refresh"' in page.text
        assert page.text.count("<svg") == 2


def test_a_session_ends_after_its_lifetime(console: LiveServer, server_clock: ManualClock) -> None:
    with _client(console) as client:
        _sign_in(client)
        assert client.get("/console").status_code == 200
        server_clock.advance(SESSION_MS + 1)
        assert client.get("/console").status_code == 303


def test_signing_out_needs_the_sessions_csrf_token(console: LiveServer) -> None:
    with _client(console) as client:
        _sign_in(client)
        page = client.get("/console").text
        token = page.split('name="csrf" value="')[1].split('"')[0]
        assert client.post("/console/logout", data={"csrf": "forged"}).status_code == 403
        assert client.get("/console").status_code == 200  # a forged form changed nothing
        out = client.post("/console/logout", data={"csrf": token})
        assert out.status_code == 303
        client.cookies.clear()
        assert client.get("/console").status_code == 303


def test_sessions_live_in_the_store_shared_by_every_process(console: LiveServer, home_qm: QueueManager,
                                                           make_console: Callable[..., LiveServer]) -> None:
    # a second console over the same store stands for the console process after a restart
    other = make_console(home_qm)
    with _client(console) as client:
        _sign_in(client)
        cookie = client.cookies["edgeq_console"]
    with _client(other) as client:
        client.cookies.set("edgeq_console", cookie, path="/console")
        assert client.get("/console").status_code == 200
        set_password(home_qm.path, "a-new-password")  # a new password signs everyone out
        assert client.get("/console").status_code == 303


def test_two_accounts_sign_in_at_once_and_a_removed_ones_session_ends(
    console: LiveServer, home_qm: QueueManager, server_clock: ManualClock
) -> None:
    add_account(home_qm.path, "bob", "bob-pass-12", "viewer")
    with _client(console) as alice, _client(console) as bob:
        assert _sign_in(alice).status_code == 303
        wrong = bob.post("/console/login", data={"user": "bob", "password": PASSWORD})  # the operator's
        assert wrong.status_code == 403 and "Wrong account name or password" in wrong.text
        server_clock.advance(FIRST_DELAY_MS)  # this address's delay after a wrong password
        nobody = bob.post("/console/login", data={"user": "nobody", "password": "bob-pass-12"})
        assert nobody.status_code == 403 and "Wrong account name or password" in nobody.text  # the same
        server_clock.advance(2 * FIRST_DELAY_MS)
        assert bob.post("/console/login", data={"user": "bob", "password": "bob-pass-12"}).status_code == 303
        assert 'id="me">operator (operator)' in alice.get("/console").text
        assert 'id="me">bob (viewer: read-only)' in bob.get("/console").text
        assert remove_account(home_qm.path, "bob")
        assert bob.get("/console").status_code == 303 and alice.get("/console").status_code == 200


def test_the_password_is_stored_hashed_and_salted(home_qm: QueueManager) -> None:
    set_password(home_qm.path, PASSWORD)
    first = load_credential(home_qm.path, account="operator")
    set_password(home_qm.path, PASSWORD)
    second = load_credential(home_qm.path, account="operator")
    assert first is not None and second is not None
    assert first.salt != second.salt and first.digest != second.digest
    raw = home_qm.path.read_bytes()
    assert PASSWORD.encode() not in raw


def test_set_console_password_from_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    QueueManager(home, name="HOME").close()
    (tmp_path / "pw").write_text("long-enough-pw\n")
    done = CliRunner().invoke(cli, ["server", "set-console-password", "--db", str(home),
                                    "--password-file", str(tmp_path / "pw")])
    assert done.exit_code == 0, done.output
    cred = load_credential(home, account="operator")
    assert cred is not None and cred.verify("long-enough-pw")
    (tmp_path / "pw").write_text("short\n")
    short = CliRunner().invoke(cli, ["server", "set-console-password", "--db", str(home),
                                     "--password-file", str(tmp_path / "pw")])
    assert short.exit_code == 2 and "at least 8 characters" in short.output


def test_set_console_password_asks_twice(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    QueueManager(home, name="HOME").close()
    done = CliRunner().invoke(cli, ["server", "set-console-password", "--db", str(home)],
                              input="long-enough-pw\nlong-enough-pw\n")
    assert done.exit_code == 0, done.output
    cred = load_credential(home, account="operator")
    assert cred is not None and cred.verify("long-enough-pw")


def test_serve_refuses_the_console_over_plain_http_off_loopback(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    QueueManager(home, name="HOME").close()
    set_password(home, PASSWORD)
    done = CliRunner().invoke(cli, ["serve", "--db", str(home), "--console", "--host", "0.0.0.0"])
    assert done.exit_code == 2 and "needs TLS" in done.output


def test_serve_refuses_the_console_without_an_account(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    QueueManager(home, name="HOME").close()
    done = CliRunner().invoke(cli, ["serve", "--db", str(home), "--console", "--port", "0"])
    assert done.exit_code == 2 and "console-user add" in done.output


def test_create_app_without_console_needs_no_jinja(home_qm: QueueManager) -> None:
    paths = {getattr(r, "path", "") for r in create_app(home_qm).routes}
    assert not any(p.startswith("/console") for p in paths)


def test_the_device_app_says_where_the_console_is(home_qm: QueueManager,
                                                  make_server: Callable[..., LiveServer],
                                                  http: httpx.Client) -> None:
    set_password(home_qm.path, PASSWORD)
    devices = make_server(home_qm, console_url="http://127.0.0.1:9/console")
    for method, path in (("GET", "/console"), ("POST", "/console/login")):
        answer = http.request(method, devices.url + path, data={"user": "operator", "password": PASSWORD})
        assert answer.status_code == 404 and "http://127.0.0.1:9/console" in answer.text
        assert "set-cookie" not in answer.headers


# -- `edgeq serve --console`: the console in a process and on a port of its own ---------------------------


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    set_password(home, PASSWORD)
    return home


def _hello(http: httpx.Client, url: str) -> httpx.Response:
    body = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": system_clock()})
    return http.post(url + p.PATH_HELLO, content=body, headers={"content-type": p.CONTENT_TYPE})


def test_serve_console_answers_the_console_on_its_port_and_devices_on_theirs(tmp_path: Path) -> None:
    with edgeq_serve_console(_home(tmp_path)) as served, httpx.Client(timeout=10) as http:
        assert _hello(http, served.url).status_code == 200
        assert _sign_in(http, served.console_url, PASSWORD).status_code == 303
        assert 'data-queue="ORDERS"' in http.get(served.console_url + "/console").text
        elsewhere = http.get(served.url + "/console")  # the device port serves no console
        assert elsewhere.status_code == 404 and f"{served.console_url}/console" in elsewhere.text
        assert http.post(served.url + "/console/login", data={"user": "operator", "password": PASSWORD}
                       ).status_code == 404
        assert _hello(http, served.console_url).status_code == 404  # nor the console's port devices
        assert http.get(served.console_url + "/healthz").text == "ok"
    (serving,) = [json.loads(x) for x in served.lines if '"event": "serve"' in x]
    assert serving["console"] == f"{served.console_url}/console"
    assert f"on 127.0.0.1:{served.url.rsplit(':', 1)[1]}; the console on {served.console_url}/console" \
        in serving["msg"]
    assert served.console_pid != served.worker_pid != served.proc.pid


def test_the_console_process_runs_at_a_lower_priority(tmp_path: Path) -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with edgeq_serve_console(_home(tmp_path)) as served:
        assert os.getpriority(os.PRIO_PROCESS, served.worker_pid) == mine
        assert os.getpriority(os.PRIO_PROCESS, served.console_pid) == min(19, mine + CONSOLE_NICENESS)


def test_killing_the_console_process_stops_the_whole_server(tmp_path: Path) -> None:
    with edgeq_serve_console(_home(tmp_path)) as served:
        os.kill(served.console_pid, signal.SIGKILL)
        assert served.proc.wait(30) == 1  # the supervisor stopped the device worker too, and said so
        with pytest.raises(httpx.ConnectError):
            httpx.get(served.url + "/healthz", timeout=5)
    said = [json.loads(x) for x in served.lines if '"event": "child-exited"' in x]
    assert [(e["pid"], e["exit"]) for e in said] == [(served.console_pid, -signal.SIGKILL)]
    assert f"the console (pid {served.console_pid}) exited (killed by SIGKILL): stopping the server" \
        == said[0]["msg"]


def test_serve_refuses_the_device_port_as_the_consoles(tmp_path: Path) -> None:
    port = str(free_port())
    done = CliRunner().invoke(cli, ["serve", "--db", str(_home(tmp_path)), "--console", "--port", port,
                                    "--console-port", port])
    assert done.exit_code == 2 and "the console needs a port of its own" in done.output
