"""The dashboard end to end in headless Chromium (Debian's ``chromium`` +
``chromium-driver``, installed by ``make test``), against the real service with
an API key and the project's Hub: give the key, download from the form and watch
the bar move and finish, load, chat, unload, and see it all in the event feed
and the model's history; cancel a download, delete a model, and restart the
service under the page (the feed reconnects and misses nothing); the model's
worker log shows its load log and follows it to the stop; a loaded model's device
(``CPU``, or the GPU with its layers and memory). Every wait is
on a DOM condition, never a sleep.

The screenshot is kept under the test's tmp dir; with
``MODELROUTER_UPDATE_SCREENSHOT=1`` it also replaces ``docs/dashboard.png``.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core import events as ev
from service.core.devices import MIB
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from service.settings import Settings
from tests import where_it_runs
from tests.conftest_hub import unique_repo

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver (make test installs them with apt-get)"
)
ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-dashboard-test-0123456789"
WAIT = 90  # seconds: two shared cores also run a browser, a service and its workers


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def until(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    # The page re-renders its lists on every event: an element found a moment ago may be gone, and one
    # not rendered yet is None (css() found nothing: AttributeError on it), so the wait goes on.
    ignored = (StaleElementReferenceException, AttributeError)
    wait = WebDriverWait(driver, WAIT, poll_frequency=0.05, ignored_exceptions=ignored)
    return wait.until(condition, f"timed out waiting for {what}")


def css(driver: WebDriver, selector: str) -> Any:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0] if found else None


def model_status(driver: WebDriver, model: str) -> str | None:
    row = css(driver, f'#models tr[data-model="{model}"]')
    return None if row is None else row.get_attribute("data-status")


def click_action(driver: WebDriver, model: str, action: str) -> None:
    def click(d: WebDriver) -> bool:
        button = css(d, f'#models tr[data-model="{model}"] button[data-action="{action}"]')
        if button is None:
            return False
        button.click()
        return True

    until(driver, click, f"the {action} button")


def choose_chat_model(driver: WebDriver, model: str) -> None:
    # Every model event redraws the select's options: one picked a moment ago may be stale, so pick
    # again until the select holds the model.
    def pick(d: WebDriver) -> bool:
        select = css(d, "#chat-model")
        Select(select).select_by_value(model)
        return bool(select.get_attribute("value") == model)

    until(driver, pick, f"{model} chosen for the chat")


# The feed is read in one script: element by element, a redraw in between makes them stale.
def feed_types(driver: WebDriver) -> list[str]:
    return list(driver.execute_script("return [...document.querySelectorAll('#feed li')].map(li => li.dataset.type)"))


def feed_positions(driver: WebDriver) -> list[int]:
    return [
        int(v) for v in driver.execute_script("return [...document.querySelectorAll('#feed li')].map(li => li.value)")
    ]


def logged_positions(svc: ServiceProcess) -> list[int]:
    """Positions of the events the feed lists (progress and stats events move bars and gauges instead)."""
    page = httpx.get(f"{svc.url}/events", params={"limit": 1000}, headers={"X-Api-Key": KEY}, timeout=10).json()
    assert page["next_after"] is None
    return [
        e["position"]
        for e in page["events"]
        if e["type"] not in ("download_progress", "loading_progress", "instance_stats")
    ]


@pytest.mark.timeout(300)
def test_download_load_chat_unload_from_the_page(browser: WebDriver, hub: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("dash")
    make_repo(hub.root, repo, {"dash-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "m.gguf").read_bytes()})
    model = f"{repo}:Q4_K_M"
    # Halfway through, the Hub holds the file until released: the bar is caught mid-way, however fast the machine.
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5})
    svc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url}, args=["--api-key", KEY]).start()
    try:
        browser.get(svc.url)
        # The first request answers 401: the page asks for the key and keeps it.
        until(browser, lambda d: css(d, "#key-form").is_displayed(), "the key form")
        css(browser, "#key-input").send_keys(KEY)
        css(browser, "#key-form button").click()
        until(browser, lambda d: css(d, "#conn").get_attribute("data-state") == "live", "the event stream")
        until(browser, lambda d: not css(d, "#key-form").is_displayed(), "the key form gone")
        assert browser.execute_script("return localStorage.getItem('modelrouter.api_key')") == KEY

        css(browser, "#download-repo").send_keys(repo)
        css(browser, "#download-form button").click()
        part = '.job[data-status="running"]:not([data-fraction="0.0000"])'
        text = until(browser, lambda d: (e := css(d, part)) and e.text, "the bar partly filled")
        assert "ETA" in text and "/" in text
        # Read in one script: the list is redrawn on every event, so a found element can go stale.
        fraction = browser.execute_script("return document.querySelector('.job').dataset.fraction")
        assert 0 < float(fraction) < 1  # stalled at half: cannot finish
        browser.save_screenshot(str(tmp_path / "dashboard-downloading.png"))
        hub.reset()  # releases the stalled response
        until(browser, lambda d: css(d, '.job[data-status="finished"][data-fraction="1.0000"]'), "the bar full")

        until(browser, lambda d: model_status(d, model) == "unloaded", "the model listed")
        click_action(browser, model, "load")
        until(browser, lambda d: model_status(d, model) == "loaded", "the model loaded")
        # The model's log beside its history: the load log now, and, followed live, what comes next.
        click_action(browser, model, "history")
        until(browser, lambda d: "print_info" in css(d, "#worker-log").text, "the load log on the page")
        assert css(browser, "#worker-log").get_attribute("data-state") == "live"

        choose_chat_model(browser, model)
        css(browser, "#chat-input").send_keys("Say hi")
        css(browser, "#chat-form button").click()
        reply = until(browser, lambda d: css(d, '.msg.assistant[data-done="true"]'), "the chat answer")
        assert not reply.text.startswith("error"), reply.text
        # The chat in the usage panel (issue 34): the only request this service has served.
        until(browser, lambda d: usage_cells(d, "")[1] == "1", "the chat in the usage panel's total")

        click_action(browser, model, "unload")
        until(browser, lambda d: model_status(d, model) == "unloaded", "the model unloaded")
        until(browser, lambda d: "instance_stopped" in css(d, "#worker-log").text, "the stop followed in the log")
        wanted = {"download_requested", "download_finished", "instance_ready", "request_completed", "instance_stopped"}
        until(browser, lambda d: wanted <= set(feed_types(d)), f"the feed showing {wanted}")
        positions = feed_positions(browser)
        assert len(positions) == len(set(positions)), "no event shown twice"

        click_action(browser, model, "history")
        history = until(browser, lambda d: css(d, '#history[data-source="history"]'), "the history timeline")
        assert "downloads" in history.text and "finished" in history.text  # the download's outcome
        assert "loads" in history.text and "unload" in history.text  # how the load ended
        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))

        # Cancel a second download while it is held halfway, then delete the first model.
        other = unique_repo("dash-cancel")
        make_repo(hub.root, other, {"other-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "o.gguf", seed=3).read_bytes()})
        hub.set_faults({"kind": "stall", "repo": other, "at_fraction": 0.5})
        css(browser, "#download-repo").send_keys(other)
        css(browser, "#download-form button").click()
        click_action(browser, f"{other}:Q4_K_M", "cancel")
        until(browser, lambda d: css(d, '.job[data-status="cancelled"]'), "the download cancelled")
        click_action(browser, model, "delete")
        browser.switch_to.alert.accept()  # the page asks before deleting files
        until(browser, lambda d: model_status(d, model) is None, "the model gone from the list")
        until(browser, lambda d: "model_removed" in feed_types(d), "model_removed in the feed")

        # The service goes away and comes back on the same port: EventSource reconnects by
        # itself with Last-Event-ID, and the feed ends up with every event exactly once.
        svc.stop()
        svc = ServiceProcess(svc.home, port=svc.port, env=svc.env, args=svc.args).start()
        until(browser, lambda d: feed_types(d).count("router_started") == 2, "the feed after the restart")
        # Equal as lists: every logged event, none twice (re-read each time: the log may still grow).
        until(browser, lambda d: sorted(feed_positions(d)) == logged_positions(svc), "every event once in the feed")
    finally:
        svc.stop()
    print(f"\nscreenshot: {shot}")
    if os.environ.get("MODELROUTER_UPDATE_SCREENSHOT") == "1":
        shutil.copy(shot, ROOT / "docs" / "dashboard.png")


@pytest.mark.timeout(240)
def test_a_crashed_models_failed_badge_opens_its_reason_and_stderr(browser: WebDriver, tmp_path: Path) -> None:
    """For each way llama.cpp workers die (SIGSEGV, SIGILL, SIGKILL), the badge unfolds the reason."""
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny.gguf")
    svc = ServiceProcess(tmp_path / "home", args=["--models-dir", str(models)]).start()
    meanings = {
        signal.SIGSEGV: ("built for another CPU", "rebuild llama-cpp-python"),
        signal.SIGILL: ("instruction this CPU cannot run", "rebuild llama-cpp-python"),
        signal.SIGKILL: ("out-of-memory killer", "smaller quantization"),
    }
    try:
        browser.get(svc.url)
        for sig, (meaning, hint) in meanings.items():
            httpx.post(f"{svc.url}/models/load", json={"model": "tiny"}, timeout=30).raise_for_status()
            until(browser, lambda d: model_status(d, "tiny") == "loaded", "the model loaded")
            entry = next(m for m in httpx.get(f"{svc.url}/models", timeout=10).json()["data"] if m["id"] == "tiny")
            os.kill(entry["status"]["instance"]["pid"], sig)
            until(browser, lambda d: model_status(d, "tiny") == "failed", f"the failed badge after {sig.name}")
            if css(browser, "details.why[open]") is None:
                css(browser, '#models tr[data-model="tiny"] details.why summary').click()
            shown = f"killed by {sig.name}"
            reason = until(
                browser,
                lambda d, want=shown: (e := css(d, "details.why[open] .reason")) and want in e.text and e.text,
                f"the {sig.name} reason shown",
            )
            assert meaning in reason
            assert hint in css(browser, "details.why .hint").text
            assert css(browser, "details.why pre.stderr").text.strip()  # the worker's last lines
        # The page re-renders the models on every event; the open reason stays open.
        httpx.post(f"{svc.url}/models/reload", timeout=30).raise_for_status()
        until(browser, lambda d: "models_reloaded" in feed_types(d), "an event after the crash")
        assert css(browser, '#models tr[data-model="tiny"] details.why[open]') is not None
    finally:
        svc.stop()


def usage_cells(driver: WebDriver, group: str) -> list[str]:
    """The usage panel's cells for ``group`` (``""``: the total; read in one script: the table is
    redrawn on every event)."""
    script = (
        "return [...document.querySelectorAll(`#usage tr[data-group='${arguments[0]}'] td`)].map(td => td.textContent)"
    )
    return list(driver.execute_script(script, group)) or ["", ""]


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """The service of tests/where_it_runs.py: ``gpu`` loaded on Vulkan0 (appended to its log), ``tiny`` to load."""
    with where_it_runs.service(tmp_path_factory.mktemp("where")) as svc:
        yield svc


def device_text(driver: WebDriver, model: str) -> str | None:
    cell = css(driver, f'#models tr[data-model="{model}"] td.device')
    return None if cell is None else str(cell.text)


@pytest.mark.timeout(180)
def test_a_gpu_model_shows_its_device_layers_and_vram(browser: WebDriver, where: ServiceProcess) -> None:
    """Passes without the worker's part: the ``instance_ready`` is appended to the real log."""
    browser.get(where.url)
    until(browser, lambda d: model_status(d, where_it_runs.GPU) == "loaded", "the gpu model listed as loaded")
    assert (
        until(browser, lambda d: device_text(d, where_it_runs.GPU), "its device") == "Vulkan0 · 19/19 layers · 65 MiB"
    )
    # The page's own formatting of the other cases, in the page: two GPUs, and a CPU build's load.
    two = {**where_it_runs.GPU_OFFLOAD.to_json(), "devices": ["Vulkan0", "Vulkan1"]}
    two["memory"] = [{"device": "Vulkan0", "total_bytes": 40 * MIB}, {"device": "Vulkan1", "total_bytes": 25 * MIB}]
    host_only = {**two, "offloaded": 0, "devices": [], "memory": [{"device": "CPU", "total_bytes": 3 * MIB}]}
    shown = browser.execute_script("return [...arguments].map((o) => deviceText({offload: o}))", two, host_only, None)
    assert shown == ["Vulkan0 + Vulkan1 · 19/19 layers · 40 MiB + 25 MiB", "CPU", ""]


@pytest.mark.timeout(180)
def test_a_model_loaded_on_a_cpu_build_shows_cpu(browser: WebDriver, where: ServiceProcess) -> None:
    """Needs the inference worker's ``instance_ready.offload``: ``-ngl 99`` on this CPU build offloads nothing."""
    browser.get(where.url)
    until(browser, lambda d: model_status(d, where_it_runs.TINY) == "unloaded", "tiny listed")
    assert device_text(browser, where_it_runs.TINY) == "", "not loaded: no device"
    click_action(browser, where_it_runs.TINY, "load")
    until(browser, lambda d: model_status(d, where_it_runs.TINY) == "loaded", "tiny loaded")
    assert until(browser, lambda d: device_text(d, where_it_runs.TINY), "tiny's device") == "CPU"


@pytest.mark.timeout(180)
def test_a_models_saved_prompt_cache_shows_its_size(browser: WebDriver, where: ServiceProcess) -> None:
    """Issue 35: the size of a model's saved prompt cache, from its ``prompt_cache_saved`` events (appended
    to the real log as its worker appends them); the cell follows a discard."""

    def append(*events: ev.Event) -> None:
        store = SyncEventStore(Settings(home=where.home).db_path, source={"kind": "test"})
        try:
            store.append([NewEvent(e, where_it_runs.GPU) for e in events])
        finally:
            store.close()

    def cell(driver: WebDriver) -> str | None:
        # Read in one script: the list is redrawn on every event, so a found element can go stale.
        script = "const c = document.querySelector(arguments[0]); return c === null ? null : c.textContent;"
        found = driver.execute_script(script, f'#models tr[data-model="{where_it_runs.GPU}"] td.prompt-cache')
        return None if found is None else str(found).strip()

    browser.get(where.url)
    until(browser, lambda d: model_status(d, where_it_runs.GPU) == "loaded", "the gpu model listed")
    assert cell(browser) == "", "nothing saved: an empty cell"
    append(
        *(
            ev.PromptCacheSaved(instance_id="gpu-0", file=f, tokens=4000, bytes=n, prefix_sha256="p", model_sha256="m")
            for f, n in (("a.bin", 3 * MIB), ("b.bin", MIB))
        )
    )
    assert until(browser, lambda d: cell(d) or None, "the cache size") == "4.0 MB · 2 files"
    append(ev.PromptCacheDiscarded(file="a.bin", reason="budget", bytes=3 * MIB))
    assert until(browser, lambda d: (text := cell(d)) != "4.0 MB · 2 files" and text, "after the discard") == (
        "1.0 MB · 1 file"
    )


@pytest.mark.timeout(180)
def test_the_usage_panel_shows_a_row_per_key_and_per_model(browser: WebDriver, where: ServiceProcess) -> None:
    """Issue 34: ``request_completed`` events (appended to the real log as the service appends them)
    summed per key in the usage panel, and per model once the panel's select asks for it."""
    store = SyncEventStore(Settings(home=where.home).db_path, source={"kind": "test"})
    try:
        done = [
            ev.RequestCompleted(
                instance_id="gpu-0",
                route="/v1/chat/completions",
                status_code=code,
                duration_ms=ms,
                key=key,
                prompt_tokens=7,
                completion_tokens=3,
            )
            for key, code, ms in (("alice", 200, 10.0), ("alice", 500, 30.0), ("bob", 200, 20.0))
        ]
        store.append([NewEvent(e, where_it_runs.GPU) for e in done])
    finally:
        store.close()
    browser.get(where.url)
    alice = until(browser, lambda d: (c := usage_cells(d, "alice"))[0] and c, "alice's usage row")
    assert alice == ["alice", "2", "14", "6", "1", "10 ms", "30 ms"]
    assert usage_cells(browser, "bob")[:4] == ["bob", "1", "7", "3"]
    Select(css(browser, "#usage-group")).select_by_value("model")
    row = until(browser, lambda d: (c := usage_cells(d, where_it_runs.GPU))[0] and c, "the model's usage row")
    assert row[1:5] == ["3", "21", "9", "1"]
