"""The lakehouse view as a user sees it: a real Airflow API server (SQLite, SimpleAuthManager, the laketide DAGs
serialized, the plugin loaded from ``plugins/``) started once for the module, headless Chromium driven by Selenium
logging in through Airflow's login form, the board of a prepared small lake, and "redo from here" starting a dry
run through Airflow's REST API as the logged-in user. Every endpoint of the plugin refuses an unauthenticated
request (401) and a user without the permission (403: SimpleAuthManager's ``viewer`` role has no DAG-run create,
a user with no role has nothing)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laketide.config import REPO_ROOT
from tests.ui_lake import EXPECTED, UiLake, build_ui_lake

pytestmark = pytest.mark.slow
PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw", "nobody": "nobody-pw"}
CHROME_ARGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--window-size=1400,1000")


@dataclass
class Server:
    url: str
    lake: UiLake
    log: Path

    def request(self, path: str, token: str | None = None, data: Any = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = None
        if data is not None:
            body, headers["Content-Type"] = json.dumps(data).encode(), "application/json"
        req = urllib.request.Request(self.url + path, data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read()
                is_json = resp.headers.get_content_type() == "application/json"
                return resp.status, json.loads(text or b"null") if is_json else text.decode()
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, text.decode(errors="replace")
        except urllib.error.URLError as exc:  # not listening (yet)
            return 0, str(exc)

    def token(self, user: str) -> str:
        status, body = self.request("/auth/token", data={"username": user, "password": PASSWORDS[user]})
        assert status in (200, 201), body
        return str(body["access_token"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    lake = build_ui_lake(tmp_path_factory.mktemp("ui-lake"))
    home = tmp_path_factory.mktemp("ui-airflow")
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LAKETIDE"))}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,nobody:",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__WORKERS": "1", "LAKETIDE_CONFIG": str(lake.config_path),
        "TZ": "UTC", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    })
    airflow = [sys.executable, "-m", "airflow"]
    for step in (["db", "migrate"], ["dags", "reserialize"]):  # the redo trigger needs the DAGs serialized
        done = subprocess.run([*airflow, *step], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = home / "api-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*airflow, "api-server", "--port", str(port)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    srv = Server(f"http://127.0.0.1:{port}", lake, log)
    try:
        deadline = time.monotonic() + 180
        while srv.request("/api/v2/monitor/health")[0] != 200:
            assert proc.poll() is None, f"the API server exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the API server did not answer: {log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield srv
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def endpoints(lake: UiLake) -> dict[str, str]:
    """Every route of the plugin, and who may use it (the user with the least rights that may)."""
    hour, snapshot = lake.key(-7), lake.snapshots[1]
    base = "/laketide/api/streams/clicks"
    return {"/laketide/": "viewer", "/laketide/static/laketide.js": "viewer", "/laketide/api/streams": "viewer",
            f"{base}/board": "viewer", f"{base}/hours/{hour}": "viewer", f"{base}/writer": "viewer",
            f"{base}/snapshots": "viewer", f"{base}/landing": "viewer", f"{base}/history": "viewer",
            f"{base}/charts": "viewer", "/laketide/static/charts.js": "viewer",
            "/laketide/api/health": "viewer", f"/laketide/redo?stream=clicks&snapshot_id={snapshot}": "admin",
            f"{base}/redo-plan?snapshot_id={snapshot}": "admin",
            f"{base}/actions/close?start={lake.key(-10)}&end={lake.key(-9)}".replace("+", "%2B"): "admin"}


def test_every_endpoint_needs_the_login_and_the_permission(server: Server) -> None:
    from laketide.airflow.ui.app import app

    routes = {getattr(r, "path", "") for r in app.routes}
    listed = endpoints(server.lake)
    covered = {p.split("?")[0].replace("/laketide", "", 1) for p in listed}
    for route in routes:  # a new route must be added to the list above
        pattern = route.replace("{stream}", "clicks").replace("{hour}", server.lake.key(-7)).replace(
            "{name}", "laketide.js").replace("{action}", "close")
        assert pattern in covered, f"route {route} is not checked"
    viewer, nobody, admin = server.token("viewer"), server.token("nobody"), server.token("admin")
    for path, least in listed.items():
        assert server.request(path)[0] == 401, path
        assert server.request(path, "not-a-token")[0] in (401, 403), path
        assert server.request(path, nobody)[0] == 403, path
        assert server.request(path, viewer)[0] == (200 if least == "viewer" else 403), path
        assert server.request(path, admin)[0] == 200, path


def test_unknown_stream_and_hour_get_a_clear_error(server: Server) -> None:
    admin = server.token("admin")
    status, body = server.request("/laketide/api/streams/nope/board", admin)
    assert status == 404 and body["detail"] == "unknown stream 'nope': configured streams are ['clicks']"
    status, body = server.request("/laketide/api/streams/clicks/hours/2026-11-22T03:30:00+00:00", admin)
    assert status == 400 and "is not the start of an hour" in body["detail"], body
    status, body = server.request("/laketide/api/streams/clicks/board?start=yesterday", admin)
    assert status == 400 and "not an ISO timestamp" in body["detail"], body
    status, body = server.request("/laketide/api/streams/clicks/redo-plan?snapshot_id=12345", admin)
    assert status == 400 and "12345 is not in the history of lake.clicks" in body["detail"], body


def browser(download_dir: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (*CHROME_ARGS, f"--user-data-dir={download_dir}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def open_view(driver: Any, server: Server, user: str) -> Any:
    """Log ``user`` in to Airflow's UI, open the lakehouse view from its navigation entry and switch into its frame;
    the wait the caller goes on with."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 60)
    driver.get(server.url + "/")
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(PASSWORDS[user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)
    driver.get(server.url + "/plugin/laketide")  # the view's entry in the UI's navigation
    driver.switch_to.frame(wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe"))))
    return wait


def test_the_view_shows_the_board_and_redo_from_here_starts_a_dry_run(server: Server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    lake = server.lake
    driver = browser(tmp_path / "chromium")
    shot = tmp_path / "lakehouse-view.png"
    try:
        wait = open_view(driver, server, "admin")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".cell[data-state=reopened]")))
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "a.redo")))
        cells = {c.get_attribute("data-hour"): c for c in driver.find_elements(By.CSS_SELECTOR, ".cell")}
        for offset, state in EXPECTED.items():
            cell = cells[lake.key(offset)]
            assert cell.get_attribute("data-state") == state, (offset, cell.get_attribute("title"))
        assert "audit 40 · lake 33 · rejects 1" in cells[lake.key(-7)].get_attribute("title")
        assert "backlog" in cells[lake.key(-3)].get_attribute("title")
        cells[lake.key(-7)].click()  # the hour's facts
        wait.until(ec.text_to_be_present_in_element((By.ID, "hour"), "audit 40 != lake 33 + rejects 1"))
        assert lake.pending_file in driver.find_element(By.ID, "landing").text
        assert "repair" in driver.find_element(By.ID, "history").text
        # the writer's batches fit their column (times wrap; what still does not fit scrolls inside the column)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#writer table")))
        table_right, column_right = driver.execute_script(
            "return [document.querySelector('#writer table').getBoundingClientRect().right,"
            " document.getElementById('writer-section').getBoundingClientRect().right];")
        assert table_right <= column_right + 1, (table_right, column_right)
        driver.switch_to.default_content()
        driver.save_screenshot(str(shot))
        print(f"screenshot of the lakehouse view: {shot}")

        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        target = str(lake.snapshots[1])
        link = driver.find_element(By.CSS_SELECTOR, f"a.redo[href*='snapshot_id={target}']")
        link.click()  # the confirmation page, in the same frame
        wait.until(ec.text_to_be_present_in_element((By.ID, "plan"), f"back to snapshot {target}"))
        assert driver.find_element(By.ID, "p-dry").is_selected()  # a dry run first
        wait.until(ec.element_to_be_clickable((By.ID, "trigger"))).click()
        run_link = wait.until(ec.presence_of_element_located((By.ID, "run-link")))
        run_id = run_link.text
        assert f"{server.url}/dags/laketide_redo/runs/" in run_link.get_attribute("href")  # the UI's run page
        driver.save_screenshot(str(tmp_path / "redo-confirmation.png"))
    finally:
        driver.quit()

    # a viewer may read the view but not start a redo: no "redo from here" link is shown to one
    status, listed = server.request("/laketide/api/streams", server.token("viewer"))
    assert status == 200 and listed["may_redo"] is False, listed
    driver = browser(tmp_path / "chromium-viewer")
    try:
        wait = open_view(driver, server, "viewer")
        wait.until(ec.text_to_be_present_in_element((By.ID, "snapshots"), str(lake.snapshots[1])))
        assert driver.find_elements(By.CSS_SELECTOR, "a.redo") == []
    finally:
        driver.quit()

    status, runs = server.request("/api/v2/dags/laketide_redo/dagRuns", server.token("admin"))
    assert status == 200
    (run,) = [r for r in runs["dag_runs"] if r["dag_run_id"] == run_id]
    assert run["conf"] == {"stream": "clicks", "snapshot_id": target, "at": None, "start": None, "end": None,
                           "dry_run": True}
    assert run["triggering_user_name"] == "admin" and run["triggered_by"] == "ui"  # the browser, as the user


def dag_run(server: Server, dag_id: str, run_id: str) -> dict[str, Any]:
    status, run = server.request(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}",
                                 server.token("admin"))
    assert status == 200, run
    return dict(run)


def run_ids(server: Server, dag_id: str) -> set[str]:
    status, runs = server.request(f"/api/v2/dags/{dag_id}/dagRuns", server.token("admin"))
    assert status == 200, runs
    return {r["dag_run_id"] for r in runs["dag_runs"]}


def test_board_range_actions_start_runs_and_their_links_open_at_top(server: Server, tmp_path: Path) -> None:
    """Select hours on the board (a click, a shift-click), start dry runs of a backfill, a repair and a redo, and a
    close range: each run exists in Airflow with the DAG's params for exactly those hours, started as the user; the
    run's link, followed, moves Airflow's page itself (not the frame) to the run. A wrong selection starts nothing
    and says why; the legend filters the board, each day has its summary, a closed hour links to its close run."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec

    from tests.ui_lake import close_run_id

    lake = server.lake
    driver = browser(tmp_path / "chromium")
    cell = lambda offset: driver.find_element(By.CSS_SELECTOR, f".cell[data-hour='{lake.key(offset)}']")
    result = lambda: driver.find_element(By.ID, "action-result").text
    before = {dag: run_ids(server, dag)
              for dag in ("laketide_backfill", "laketide_repair", "laketide_redo", "laketide_close_clicks")}
    try:
        wait = open_view(driver, server, "admin")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".cell[data-state=closed]")))
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-action=backfill]")))
        # nothing selected: a clear message, nothing started
        driver.find_element(By.CSS_SELECTOR, "[data-action=repair]").click()
        assert "no hour selected" in result()
        # the current hour cannot be closed: refused by the view's check, nothing started
        cell(0).click()
        driver.find_element(By.CSS_SELECTOR, "[data-action=close]").click()
        wait.until(lambda d: "refused, nothing started" in result())
        assert "is in the future" in result()

        # a closed hour: its close run's link; then the range H-10 .. H-9 (click, shift-click)
        cell(-10).click()
        hour_run = wait.until(ec.presence_of_element_located((By.ID, "hour-run")))
        assert hour_run.get_attribute("href") == (
            f"{server.url}/dags/laketide_close_clicks/runs/{urllib.parse.quote(close_run_id(lake.hour(-10)), safe='')}")
        ActionChains(driver).key_down(Keys.SHIFT).click(cell(-9)).key_up(Keys.SHIFT).perform()
        assert driver.find_element(By.ID, "selection").text == f"{lake.key(-10)} → {lake.key(-9)} (2 hours)"
        assert len(driver.find_elements(By.CSS_SELECTOR, ".cell.selected")) == 2
        assert driver.find_element(By.ID, "action-dry").is_selected()  # a dry run first

        driver.find_element(By.CSS_SELECTOR, "[data-action=backfill]").click()
        backfill_id = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#action-result #run-link"))).text
        assert "Started dry run: backfill of clicks" in result()
        driver.find_element(By.CSS_SELECTOR, "[data-action=repair]").click()
        wait.until(lambda d: "Started dry run: repair of clicks" in result())
        repair_id = driver.find_element(By.CSS_SELECTOR, "#action-result #run-link").text
        driver.find_element(By.CSS_SELECTOR, "[data-action=close]").click()
        wait.until(lambda d: "Started close range" in result())
        close_link = driver.find_element(By.CSS_SELECTOR, "#action-result #run-link")
        close_id = close_link.text
        driver.switch_to.default_content()
        driver.save_screenshot(str(tmp_path / "board-actions.png"))
        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))

        # the run's link moves Airflow's page (top level) to the run, out of the frame
        driver.find_element(By.CSS_SELECTOR, "#action-result #run-link").click()
        driver.switch_to.default_content()
        run_path = f"/dags/laketide_close_clicks/runs/{urllib.parse.quote(close_id, safe='')}"
        wait.until(lambda d: urllib.parse.unquote(d.current_url).endswith(urllib.parse.unquote(run_path)))
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), close_id))
        assert driver.find_elements(By.CSS_SELECTOR, "iframe[title=Lakehouse]") == []
        driver.save_screenshot(str(tmp_path / "close-run.png"))

        # the legend filters the board on a state; every day has its summary
        driver.get(server.url + "/plugin/laketide")
        driver.switch_to.frame(wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe"))))
        # a redo dry run of the hours H-7 .. H-5: back to the snapshot before their first commit, scoped to them
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[data-action=redo]")))
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f".cell[data-hour='{lake.key(-7)}']")))
        cell(-7).click()
        ActionChains(driver).key_down(Keys.SHIFT).click(cell(-5)).key_up(Keys.SHIFT).perform()
        driver.find_element(By.CSS_SELECTOR, "[data-action=redo]").click()
        wait.until(lambda d: "Started dry run: redo of clicks" in result())
        redo_id = driver.find_element(By.CSS_SELECTOR, "#action-result #run-link").text
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-legend=failed]"))).click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".cell")) == 1)
        assert cell(-7).get_attribute("data-state") == "failed"
        assert driver.find_element(By.ID, "state-filter").get_attribute("value") == "failed"
        summary = driver.find_element(By.CSS_SELECTOR, f".day-sum[data-day='{lake.key(-7)[:10]}']").text
        assert "failed 1" in summary and "rows" in summary and "rejects" in summary
    finally:
        driver.quit()

    backfill = dag_run(server, "laketide_backfill", backfill_id)
    assert backfill["conf"] == {"stream": "clicks", "start": lake.key(-10), "end": lake.key(-8), "dry_run": True}
    repair = dag_run(server, "laketide_repair", repair_id)
    assert repair["conf"] == {"stream": "clicks", "start": lake.key(-10), "end": lake.key(-8), "dry_run": True}
    redo = dag_run(server, "laketide_redo", redo_id)
    assert redo["conf"] == {"stream": "clicks", "snapshot_id": str(lake.snapshots[1]), "at": None,
                            "start": lake.key(-7), "end": lake.key(-4), "dry_run": True}
    close = dag_run(server, "laketide_close_clicks", close_id)
    assert close["conf"] == {"start": lake.key(-10), "end": lake.key(-8)}
    for run in (backfill, repair, redo, close):
        assert run["triggering_user_name"] == "admin" and run["triggered_by"] == "ui", run  # as the user
    started = {dag: run_ids(server, dag) - ids for dag, ids in before.items()}
    assert started == {"laketide_backfill": {backfill_id}, "laketide_repair": {repair_id},
                       "laketide_redo": {redo_id},
                       "laketide_close_clicks": {close_id}}  # the refused requests started nothing

    # a viewer may start none of these runs: no action button is shown to one
    driver = browser(tmp_path / "chromium-viewer")
    try:
        wait = open_view(driver, server, "viewer")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".cell[data-state=closed]")))
        assert not driver.find_element(By.ID, "actions").is_displayed()
        assert [b for b in driver.find_elements(By.CSS_SELECTOR, "[data-action]") if b.is_displayed()] == []
    finally:
        driver.quit()


def test_the_charts_are_drawn_with_the_lakes_figures(server: Server, tmp_path: Path) -> None:
    """The charts section: SVG drawn in the page (no library, nothing fetched from elsewhere), one bar pair per hour
    of the board's range (7 days), a point per writer batch, the closed hour's files, today's snapshots."""
    from selenium.webdriver.common.by import By

    driver = browser(tmp_path / "chromium-charts")
    try:
        wait = open_view(driver, server, "admin")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-days circle.pt-snapshots"))
        hours = driver.find_elements(By.CSS_SELECTOR, "#chart-rows rect.bar-rows")
        assert len(hours) == len(driver.find_elements(By.CSS_SELECTOR, "#chart-rows rect.bar-rejects")) == 7 * 24
        tall = [r for r in hours if float(r.get_attribute("height")) > 0]
        assert len(tall) == 5  # the five hours with rows (H-10, H-8 .. H-5)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#chart-batches circle.pt-latency_s")) == 5
        assert len(driver.find_elements(By.CSS_SELECTOR, "#chart-batches circle.pt-lag_s")) == 5
        assert len(driver.find_elements(By.CSS_SELECTOR, "#chart-files rect.bar-files")) == 1  # H-10, closed
        (today,) = driver.find_elements(By.CSS_SELECTOR, "#chart-days circle.pt-snapshots")
        assert "snapshots 5" in today.get_attribute("textContent")
        driver.switch_to.default_content()
        driver.save_screenshot(str(tmp_path / "charts.png"))
    finally:
        driver.quit()
