"""End to end in a real browser: JupyterLab on 127.0.0.1, a model notebook, its live panel;
and the claims dashboard and run index as a reader opens them (screenshots ``claims.png``
and ``index.png`` beside ``panel.png``).

Starts JupyterLab (token-less, a temporary root) with the project's kernel, opens
``04_policy_improvement`` with small parameters in headless Chromium driven by Playwright, runs
every cell once the kernel is idle (and a second panel, given none of the notebook's results),
checks that no image in the widgets (the panels' figures, the compare view's) is empty (a
broken-image icon), presses Run on the panel, waits until its figure has been redrawn at least
twice and its progress bar has moved, presses Stop, checks the browser console for errors and
saves a screenshot (``$LAB_ARTIFACTS`` or the test's temporary folder). Every wait is on a
condition in the page, never on a clock. Needs Debian's ``chromium``
(``scripts/system_deps.sh`` installs it) and the ``playwright`` package (no downloaded
browsers); skips, saying what to install, without them."""

import json
import os
import socket
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ROOT, WAIT, wait_for

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
# Small enough for a quick notebook run, long enough for several live redraws.
PARAMS = {"agent": "mpo", "compare": False, "seeds": 1, "total_steps": 2000, "eval_every": 50,
          "widths": 8, "batch_size": 16}


MS = WAIT * 1000  # Playwright's timeouts are in milliseconds
# The notebook's kernel has started and waits for work (then Run All cannot be lost).
KERNEL_IDLE = """() => {
    const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = widget && widget.sessionContext && widget.sessionContext.session
                   && widget.sessionContext.session.kernel;
    return !!kernel && kernel.status === "idle";
}"""
# Once at least ``n`` images in the widgets are shown (hidden ones, such as a viewer's before
# it is asked, aside) and all have loaded: their natural widths, 0 for an empty image.
SHOWN_IMAGES = """n => {
    const shown = [...document.querySelectorAll(".jp-OutputArea-output img.widget-image")]
        .filter(e => e.getClientRects().length > 0);
    return shown.length >= n && shown.every(e => e.complete) && shown.map(e => e.naturalWidth);
}"""


@contextmanager
def browser_page(height: int, errors: list[str]):
    """A page of headless Chromium, every console error and page error appended to
    ``errors``; skips, saying what to install, without Chromium or Playwright."""
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: apt-get install chromium (scripts/system_deps.sh does)")
    pytest.importorskip("playwright", reason="pip install playwright (the dev extra)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page
        finally:
            browser.close()


def artifacts_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$LAB_ARTIFACTS`` or the test's temporary folder."""
    folder = Path(os.environ.get("LAB_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: apt-get install chromium (scripts/system_deps.sh does)")
    pytest.importorskip("playwright", reason="pip install playwright (the dev extra)")
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.read(ROOT / "notebooks/04_policy_improvement.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    cell.source += "".join(f"\n{name} = {value!r}" for name, value in PARAMS.items())
    # last, a second panel given none of the notebook's results: it opens on its empty axes
    nb.cells.append(nbformat.v4.new_code_cell("policy_improvement_panel(params).show()"))
    nbformat.write(nb, root / "04.ipynb")
    port = _free_port()
    env = os.environ | {"LAB_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    env.pop("LAB_RUN_DIR", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--IdentityProvider.token=", "--ServerApp.password=",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.expose_app_in_browser=True",
         "--allow-root",
         f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=root)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if server.poll() is not None:
            raise RuntimeError(server.stdout.read().decode()[-3000:])
        try:
            return urllib.request.urlopen(f"{url}/api/status", timeout=5).status == 200
        except OSError:
            return False

    try:
        wait_for(answers, f"JupyterLab to answer on {url}", poll=0.5)
    except BaseException:
        server.kill()
        raise
    yield url, root
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.mark.slow
def test_panel_trains_live_in_jupyterlab(jupyterlab, tmp_path):
    url, _ = jupyterlab
    artifacts, errors = artifacts_dir(tmp_path), []
    with browser_page(1000, errors) as page:
        page.goto(f"{url}/lab/tree/04.ipynb", timeout=MS)
        page.wait_for_function(KERNEL_IDLE, timeout=MS, polling=200)
        # Run All's promise settles only when every cell has run: start it, don't await it
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells');"
                      " }")
        run = page.locator("button.widget-button", has_text="Run").first  # the notebook's
        run.wait_for(timeout=2 * MS)
        image = page.locator(".jp-OutputArea-output", has_text="Policy improvement: MPO"
                             ).locator("img.widget-image").first
        image.wait_for(timeout=MS)
        # the panel's figure (the notebook's runs), the compare view's and the second
        # panel's (no runs: their empty axes)
        widths = page.wait_for_function(SHOWN_IMAGES, arg=3, timeout=MS, polling=100)
        assert 0 not in widths.json_value(), f"an empty image: widths {widths.json_value()}"
        sources = {image.get_attribute("src")}
        bar = page.locator(".widget-hprogress .progress-bar").first
        run.click()

        def redrawn():
            sources.add(image.get_attribute("src"))
            return len(sources) >= 3

        wait_for(redrawn, "the live figure to be redrawn twice after Run", poll=0.1)
        width = bar.evaluate("e => parseFloat(e.style.width || '0')")
        page.locator("button.widget-button", has_text="Stop").first.click()
        page.wait_for_function(
            "[...document.querySelectorAll('.widget-html')].some("
            "e => /stopped|done/.test(e.textContent))", timeout=MS)
        # jupyter/overrides.json (make setup installs it): no "get notified about
        # official Jupyter news?" toast, which by now would have shown
        assert page.get_by_text("official Jupyter news").count() == 0
        panel = page.locator(".jp-OutputArea-output", has_text="Policy improvement: MPO").first
        panel.scroll_into_view_if_needed()
        panel.screenshot(path=str(artifacts / "panel.png"))
    assert 0 < width, "the progress bar did not move"
    assert not errors, errors
    assert (artifacts / "panel.png").stat().st_size > 10_000


def test_jupyterlab_does_not_ask_about_news(jupyterlab):
    """The project's JupyterLab settings (jupyter/overrides.json, installed into the
    environment by make setup) answer the news question: never fetch, never ask."""
    url, _ = jupyterlab
    name = "@jupyterlab/apputils-extension:notification"
    with urllib.request.urlopen(f"{url}/lab/api/settings/{name}", timeout=WAIT) as answer:
        schema = json.load(answer)["schema"]["properties"]
    assert schema["fetchNews"]["default"] == "false"
    assert schema["checkForUpdates"]["default"] is False


@pytest.mark.slow
def test_claims_dashboard_and_index_in_a_browser(tmp_path):
    """The claims dashboard and the index, built from metrics.json files, as a reader sees
    them: verdict badges drawn, the index's filters working; screenshots saved."""
    from lab.runs import build_index
    from tests.test_reports import claim_metrics, write_run

    out = tmp_path / "reports"
    write_run(out, "01-default", "01_proxprop.ipynb", "2026-11-21T10:00:00+00:00",
              claim_metrics("does not hold"))
    write_run(out, "01-claim", "01_proxprop.ipynb", "2026-11-22T10:00:00+00:00",
              claim_metrics("holds", preset_note=", claim preset"),
              parameters={"preset": "claim"}, overrides={"preset": "claim"})
    write_run(out, "00-failed", "00_quickstart.ipynb", "2026-11-23T10:00:00+00:00", {},
              status="failed")
    build_index(out)
    artifacts, errors = artifacts_dir(tmp_path), []
    with browser_page(700, errors) as page:
        page.goto((out / "claims.html").as_uri(), timeout=MS)
        badges = page.locator("#claims .verdict")
        assert badges.count() == 4
        assert badges.first.is_visible()
        assert page.locator("#claims .v-holds").count() == 1
        page.screenshot(path=str(artifacts / "claims.png"), full_page=True)
        page.goto((out / "index.html").as_uri(), timeout=MS)
        count = page.locator("#f-count")
        assert count.text_content() == "3 of 3 runs shown"
        page.select_option("#f-notebook", "01_proxprop.ipynb")
        assert count.text_content() == "2 of 3 runs shown"
        page.select_option("#f-status", "failed")
        assert count.text_content() == "0 of 3 runs shown"
        page.select_option("#f-notebook", "")
        assert count.text_content() == "1 of 3 runs shown"
        page.screenshot(path=str(artifacts / "index.png"), full_page=True)
    assert not errors, errors
    assert (artifacts / "claims.png").stat().st_size > 10_000
