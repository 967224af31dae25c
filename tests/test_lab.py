"""JupyterLab for real: the server `make lab` starts runs a study notebook, and the
study's exported HTML draws its bokeh plots in headless Chromium.

The server listens on 127.0.0.1 with a token, the kernel is the ``lisa-ext``
kernelspec installed the way ``make lab`` installs it (into a temporary prefix
here), and every cell goes through the server: a session created with its REST
API, code sent over the kernel's websocket. The executed notebook is exported
as `lisa-ext study run` exports it, and Chromium must show plots that are
there only when JavaScript runs (bokeh draws on canvases), with no error on
its console. Nothing leaves the loopback interface.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import nbformat
import numpy as np
import pytest

import browser

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wq-affinity"
#: the study notebook runs on board data (two LLC domains), the analyses' plots on the host sample
BOARD_SAMPLE = REPO / "data" / "samples" / "wq-affinity-board"
NOTEBOOK = "wq-affinity.ipynb"
_ERRORS = ("error", "uncaught", "failed", "exception")


def _need_chromium() -> None:
    if browser.chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium missing in CI (scripts/install-system-packages.sh installs it)")
        pytest.skip("chromium is not installed (scripts/install-system-packages.sh)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, port: int, token: str):
        self.base, self.token = f"127.0.0.1:{port}", token

    def api(self, path: str, body: dict | None = None):
        request = urllib.request.Request(
            f"http://{self.base}/api/{path}", method="POST" if body is not None else "GET",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _need_chromium()
    root = tmp_path_factory.mktemp("lab")
    # as `make lab` does, into a prefix of our own instead of the venv's
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(root / "prefix"),
                    "--name", "lisa-ext", "--display-name", "Python (lisa-ext)"], check=True,
                   capture_output=True)
    env = dict(os.environ, JUPYTER_PATH=str(root / "prefix" / "share" / "jupyter"),
               JUPYTER_RUNTIME_DIR=str(root / "runtime"), JUPYTER_CONFIG_DIR=str(root / "config"),
               JUPYTER_DATA_DIR=str(root / "data"), PYTHONPATH=str(REPO))
    port, token = _free_port(), secrets.token_hex(16)
    log = open(root / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO / 'notebooks'}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    lab = Lab(port, token)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                lab.api("status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {(root / 'lab.log').read_text()}")
                time.sleep(1)
        yield lab
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def _execute(ws, session: str, code: str, timeout: float = 900) -> list:
    """Run ``code`` on the kernel behind ``ws``; its outputs as nbformat outputs."""
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": session,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
    outputs, replied, idle = [], None, False
    deadline = time.monotonic() + timeout
    while replied is None or not idle:
        ws.settimeout(max(1.0, deadline - time.monotonic()))
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg["header"]["msg_type"]
        if kind in ("stream", "display_data", "execute_result", "error"):
            outputs.append(nbformat.v4.output_from_msg(msg))
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            idle = True
        elif kind == "execute_reply":
            replied = msg["content"]
    assert replied["status"] == "ok", (code, replied, outputs)
    return outputs


def test_console_check_sees_errors(tmp_path):
    """The console check below can fail: a page that logs an error is caught."""
    _need_chromium()
    page = tmp_path / "probe.html"
    page.write_text('<html><body><script>console.error("lisa-ext probe")</script></body></html>')
    assert any("lisa-ext probe" in line for line in browser.load(page, 400, 300).console)


def test_study_notebook_through_the_server_draws_in_chromium(lab, tmp_path):
    import websocket

    assert "lisa-ext" in lab.api("kernelspecs")["kernelspecs"]
    nb = nbformat.read(REPO / "notebooks" / NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "lisa-ext"
    session = lab.api("sessions", {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook",
                                   "kernel": {"name": "lisa-ext"}})
    kernel = session["kernel"]["id"]
    ws = websocket.create_connection(
        f"ws://{lab.base}/api/kernels/{kernel}/channels?token={lab.token}", timeout=60)
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            if "parameters" in cell.metadata.get("tags", []):
                cell.source += (f"\ncampaign_dir = {str(BOARD_SAMPLE)!r}\n"
                                f"report_dir = {str(tmp_path / 'report')!r}\n")
            cell.outputs = _execute(ws, session["id"], cell.source)
    finally:
        ws.close()
    assert (tmp_path / "report" / "kcryptd-locality.png").is_file()
    explorer = list((tmp_path / "report").glob("explorer_*.html"))
    assert len(explorer) == 1
    shown = [o for o in nb.cells[-1].outputs if "data" in o]
    assert shown and "<iframe" in shown[0]["data"]["text/html"]

    from lisa_ext.study import export_notebook

    page = export_notebook(nb, tmp_path / "wq-affinity.html")
    html = page.read_text()
    assert "Bokeh" in html
    drawn = browser.load(page, height=9000)
    still = browser.load(page, height=9000, javascript=False)
    errors = [line for line in drawn.console if any(w in line.lower() for w in _ERRORS)]
    assert not errors, errors
    # bokeh draws on canvases: colored plot pixels that are absent without JavaScript,
    # spread over several plot rows (the explorer's panels)
    extra = browser.colored_pixels(drawn.pixels) & ~browser.colored_pixels(still.pixels)
    rows = np.flatnonzero(extra.sum(axis=1) > 20)
    assert extra.sum() > 5000, extra.sum()
    assert rows.max() - rows.min() > 200, (rows.min(), rows.max())


def test_analysis_plots_render_as_bokeh_in_the_lab_kernel(lab):
    """An analysis's plot_* (a holoviews element) shown in a JupyterLab kernel
    is an interactive bokeh plot: HoloViews' bokeh mime bundle, not a PNG."""
    import websocket

    trace = SAMPLE / "runs" / "cache" / "fio-randread" / "0" / "trace.dat"
    session = lab.api("sessions", {"path": "plots.ipynb", "name": "plots.ipynb",
                                   "type": "notebook", "kernel": {"name": "lisa-ext"}})
    ws = websocket.create_connection(
        f"ws://{lab.base}/api/kernels/{session['kernel']['id']}/channels?token={lab.token}",
        timeout=60)
    try:
        outputs = _execute(ws, session["id"], (
            "from lisa_ext import study\n"
            "study.use_bokeh()\n"
            "from lisa_ext.report.traces import load_trace\n"
            f"trace = load_trace({str(trace)!r})\n"
            "trace.ana.wq_placement.plot_placement_heatmap()"))
    finally:
        ws.close()
    results = [o for o in outputs if o["output_type"] == "execute_result"]
    assert len(results) == 1
    data = results[0]["data"]
    assert "application/vnd.holoviews_exec.v0+json" in data, list(data)
    assert "image/png" not in data
    assert "bokeh" in data["text/html"].lower()
