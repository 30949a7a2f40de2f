"""The HTML report in a real browser: headless Chromium loads it without console errors,
and both plot images decode and render with a non-zero size.

Chromium is a system package the tests do not install: `make system-deps` (run once
by .ci/run) installs Debian's `chromium`; without it the test is skipped with the reason.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from commbench.analysis.report import html
from commbench.analysis.report.build import build_report
from commbench.runfolder.reader import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
pytestmark = pytest.mark.browser
# Injected into a copy of the page: records load errors and each image's decoded and laid-out size.
PROBE = """<script>
window.__errs = [];
window.addEventListener('error',
  e => window.__errs.push(String(e.message || (e.target && e.target.src || e.type)).slice(0, 80)), true);
for (const level of ['error', 'warn']) {
  const orig = console[level];
  console[level] = (...a) => { window.__errs.push(level + ': ' + a.join(' ')); orig.apply(console, a); };
}
window.addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({w: i.naturalWidth, h: i.naturalHeight,
                                              shown: i.getBoundingClientRect().width}));
  const d = document.createElement('pre');
  d.id = 'probe';
  d.textContent = JSON.stringify({imgs: imgs, errors: window.__errs});
  document.body.appendChild(d);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("headless Chromium is not installed (`make system-deps` installs Debian's chromium)")
    return found


def _open(chromium: str, page: str, tmp_path: Path) -> tuple[dict, str]:
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=5000", "--user-data-dir=" + str(tmp_path / "profile"),
         "--dump-dom", probe_page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, "the page did not finish loading: " + proc.stdout[-500:]
    return json.loads(m.group(1).replace("&quot;", '"')), proc.stderr


def test_report_renders_in_chromium(chromium, tmp_path):
    page = html.render(build_report([load_run(RUNS / "cpu-damaged")]))
    probe, stderr = _open(chromium, page, tmp_path)
    assert probe["errors"] == []
    assert not re.search(r"CONSOLE.*(error|Uncaught)", stderr, re.I)
    assert len(probe["imgs"]) == 2
    for img in probe["imgs"]:
        assert img["w"] > 0 and img["h"] > 0 and img["shown"] > 0


def test_probe_sees_a_broken_image(chromium, tmp_path):
    """Control: the same check fails on a page whose image does not decode."""
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
            "<img alt='x' src='data:image/png;base64,AAAA'></body></html>")
    probe, _ = _open(chromium, page, tmp_path)
    assert probe["imgs"][0]["w"] == 0
    assert probe["errors"], "a failed image load must be recorded"
