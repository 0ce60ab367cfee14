"""The what-if page in a real browser: Debian's headless Chromium, driven by selenium through chromedriver.

The test loads ``/`` from a real server, picks a shipped scenario, runs a comparison
and checks what the page shows against the plans the API returns: one grid per
scheduler with one block per placed job in the job's colour of the report's
palette, the metrics table (ppo's winner in the planner's words: a candidate or
the guard), the legend's words, one demand chart per real-time app, and one time
axis for every grid and chart (mixed-control's fifo and greedy plans run past the
horizon, ppo's does not).
Skipped, saying why, where Chromium, chromedriver or selenium is missing
(``.ci/run`` installs Debian's ``chromium`` and ``chromium-driver``). With
``GPUALLOC_SCREENSHOT=docs/serve-whatif.png`` it saves the page as that picture.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agents.options import PlanOptions
from agents.registry import run_scheduler
from gpu_env.generators import BENCHMARK_SEEDS, generate
from gpu_env.render import palette
from tests.conftest import HANG_GUARD_S
from tests.serve_helpers import running_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCENARIO = "mixed-control"
SCHEDULERS = ["fifo", "greedy", "ppo", "cpsat"]


def _browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(
            f"no {' or '.join(missing)}: the browser test needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; .ci/run installs them)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the serve extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1900",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def test_the_page_compares_schedulers_and_draws_their_plans(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = _browser()
    try:
        with running_server(tmp_path, name="page") as server:
            driver.set_page_load_timeout(HANG_GUARD_S)
            driver.get(server.url + "/")
            Select(driver.find_element(By.ID, "scenario-select")).select_by_value(SCENARIO)
            for box in driver.find_elements(By.CSS_SELECTOR, "#scheduler-boxes input"):
                if box.is_selected() != (box.get_attribute("value") in SCHEDULERS):
                    box.click()
            time_limit = driver.find_element(By.ID, "time-limit")
            time_limit.clear()
            time_limit.send_keys("5")
            driver.find_element(By.ID, "run").click()
            WebDriverWait(driver, HANG_GUARD_S).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
            )
            state = driver.find_element(By.TAG_NAME, "body").get_attribute("data-state")
            assert state == "done", driver.find_element(By.ID, "status").text

            sc = generate(SCENARIO, BENCHMARK_SEEDS[SCENARIO])
            colours = palette()
            rows = driver.find_elements(By.CSS_SELECTOR, "#metrics tbody tr")
            assert [r.get_attribute("data-scheduler") for r in rows] == SCHEDULERS
            made = {}  # the deterministic schedulers' plans, made here
            grids = driver.find_elements(By.CSS_SELECTOR, "svg.grid")
            assert [g.get_attribute("data-scheduler") for g in grids] == SCHEDULERS
            for name, row, grid in zip(SCHEDULERS, rows, grids, strict=True):
                objective = float(row.find_element(By.CLASS_NAME, "objective").text)
                blocks = grid.find_elements(By.CSS_SELECTOR, "rect.job")
                placed = int(row.find_element(By.CLASS_NAME, "placed").text.split("/")[0])
                assert len(blocks) == placed, name
                for block in blocks:
                    index = sc.job_index(block.get_attribute("data-job"))
                    assert block.get_attribute("fill") == colours["jobs"][index % len(colours["jobs"])]
                if name != "cpsat":  # deterministic: the page shows the plan made here
                    here = made[name] = run_scheduler(name, sc, PlanOptions())
                    assert objective == pytest.approx(here.metrics.objective, abs=0.005), name
                    assert placed == here.metrics.placed
                assert grid.find_elements(By.CSS_SELECTOR, "rect.served"), name  # the app's capacity is drawn
            how = {r.get_attribute("data-scheduler"): r.find_element(By.CLASS_NAME, "how").text for r in rows}
            assert how["cpsat"].split(",")[0] in ("optimal", "feasible")
            winner, samples = made["ppo"].info["winner"], made["ppo"].info["samples"]  # the server's: same seed
            words = f"candidate {winner} of {samples} won" if isinstance(winner, int) else f"the {winner} guard won"
            assert how["ppo"] == words
            assert "rollout" not in driver.find_element(By.ID, "results").text.lower()
            legend = driver.find_element(By.ID, "legend").text
            for app in sc.apps:
                assert f"{app.name}: {colours['legend']['serving']}" in legend
            charts = driver.find_elements(By.CSS_SELECTOR, "svg.realtime")
            assert [c.get_attribute("data-app") for c in charts] == [a.name for a in sc.apps]
            curves = charts[0].find_elements(By.CSS_SELECTOR, "path.curve")
            assert [c.get_attribute("stroke") for c in curves] == [colours["schedulers"][n] for n in SCHEDULERS]

            # one time axis for every panel: as many slots, as wide, the same ticks, however far each plan runs
            duration = {job.id: job.duration for job in sc.jobs}
            ends = {n: max([sc.slots] + [p.start + duration[p.job] for p in q.placements]) for n, q in made.items()}
            assert ends["ppo"] < min(ends["fifo"], ends["greedy"])  # the case this checks: ppo's plan ends sooner
            panels = grids + charts
            axes = {(p.get_attribute("data-slots"), p.get_attribute("data-slot-width")) for p in panels}
            assert len(axes) == 1, axes
            assert int(axes.pop()[0]) >= max(ends.values())
            assert len({p.get_attribute("width") for p in panels}) == 1
            ticks = [[t.text for t in p.find_elements(By.CSS_SELECTOR, "text.tick")] for p in panels]
            assert ticks[0] and all(t == ticks[0] for t in ticks), ticks
            shot = os.environ.get("GPUALLOC_SCREENSHOT")
            if shot:
                driver.save_screenshot(shot)

            # an uploaded scenario (YAML text), with an inherited job: read by the server like a file
            pasted = "\n".join(
                [
                    "name: pasted",
                    "cluster: {gpus: 4}",
                    "horizon: {slots: 6}",
                    "jobs:",
                    "- {id: old, type: training, gpus: 2, duration: 3, running_on: [0, 1]}",
                    "- {id: new, type: training, gpus: 2, duration: 2}",
                ]
            )
            upload = tmp_path / "uploaded.yaml"  # uploaded: the file's text lands in the box, as if pasted
            upload.write_text(pasted + "\n")
            driver.find_element(By.ID, "scenario-file").send_keys(str(upload))
            WebDriverWait(driver, HANG_GUARD_S).until(
                lambda d: d.find_element(By.ID, "scenario-text").get_attribute("value").strip() == pasted
            )
            assert driver.find_element(By.ID, "source-pasted").is_selected()
            driver.find_element(By.ID, "run").click()
            WebDriverWait(driver, HANG_GUARD_S).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
            )
            assert driver.find_element(By.ID, "results-title").text.startswith("pasted: 4 GPUs x 6 slots, 2 jobs")
            assert colours["legend"]["inherited"] in driver.find_element(By.ID, "legend").text
            inherited = driver.find_elements(By.CSS_SELECTOR, 'svg.grid rect.job[data-job="old"]')
            assert inherited and all(r.get_attribute("stroke-dasharray") for r in inherited)

            # bad input: the server's one line, shown as it is
            driver.find_element(By.ID, "scenario-text").clear()
            driver.find_element(By.ID, "scenario-text").send_keys("name: x\ncluster: {gpus: 0}\nhorizon: {slots: 4}\n")
            driver.find_element(By.ID, "run").click()
            WebDriverWait(driver, HANG_GUARD_S).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
            )
            assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "error"
            assert "422: scenario: cluster." in driver.find_element(By.ID, "status").text
    finally:
        driver.quit()
