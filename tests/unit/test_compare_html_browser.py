"""The compare report at 1400 px in headless Chromium: every table fits the page (the `why` column
visible, no sideways scrolling), a points row takes one or two lines, and the plot renders.

Chromium is a system package (`make system-deps`); without it the test is skipped with the reason."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from commbench.analysis.compare import compare_runs
from commbench.analysis.compare_summary import compare_document
from commbench.analysis.report import html
from commbench.runfolder.reader import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
pytestmark = pytest.mark.browser
PROBE = """<script>
window.addEventListener('load', () => {
  const lh = parseFloat(getComputedStyle(document.body).lineHeight) || 19;
  const heads = [...document.querySelectorAll('th')].filter(t => t.textContent === 'why');
  const rows = [...document.querySelectorAll('tr')].filter(r => r.querySelector('td'));
  const d = document.createElement('pre');
  d.id = 'probe';
  d.textContent = JSON.stringify({
    page: document.documentElement.scrollWidth, view: window.innerWidth, line: lh,
    why_right: heads.map(t => t.getBoundingClientRect().right),
    tallest: Math.max(...rows.map(r => r.getBoundingClientRect().height)),
    imgs: [...document.images].map(i => i.naturalWidth)});
  document.body.appendChild(d);
});
</script>"""


def test_compare_html_reads_at_1400_px(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("headless Chromium is not installed (`make system-deps` installs Debian's chromium)")
    base, new = load_run(RUNS / "quiet-pair-a"), load_run(RUNS / "quiet-pair-b")
    from commbench.analysis.compare import CompareSettings

    doc = compare_document("a", "b", compare_runs(base, new), CompareSettings())
    page = tmp_path / "c.html"
    page.write_text(html.render(doc).replace("<head>", "<head>" + PROBE, 1))
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                           "--virtual-time-budget=5000", "--user-data-dir=" + str(tmp_path / "profile"),
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    probe = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S).group(1).replace("&quot;", '"'))
    assert probe["page"] <= probe["view"] + 1, probe           # nothing off-screen to the right
    assert probe["why_right"] and max(probe["why_right"]) <= probe["view"], probe
    assert probe["tallest"] <= 2.6 * probe["line"] + 8, probe   # one or two lines a row
    assert probe["imgs"] and min(probe["imgs"]) > 0
