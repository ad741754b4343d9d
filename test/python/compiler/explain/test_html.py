"""The explain HTML page: self-contained, coloured by sharding, opened by headless chromium."""

import os
import shutil
import subprocess
import tempfile

import pytest

import shardc.compiler as sc


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI") != "true":
        pytest.skip("chromium not installed (CI installs it and runs this test)")
    assert found is not None, "CI=true: chromium must be installed (.ci/run installs it)"
    return found


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from bench.models import REGISTRY

    program = REGISTRY["fsdp_train_step"]("small")
    lowered = sc.jit(program.fun, in_shardings=program.in_shardings,
                     out_shardings=program.out_shardings).lower(*program.args)
    path = tmp_path_factory.mktemp("html") / "explain.html"
    path.write_text(lowered.explain().to_html("fsdp_train_step"))
    return path


def test_page_is_self_contained_and_highlights_collectives(page):
    text = page.read_text()
    assert "<script" not in text and "http" not in text.replace("http-equiv", "")
    assert text.count('class="collective"') >= 3 and "all-gather" in text
    assert 'table class="grid"' in text and "background:#cfe3ff" in text


def test_headless_chromium_screenshot(page, tmp_path):
    chromium = _chromium()
    png = tmp_path / "out.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tempfile.mkdtemp()}", f"--screenshot={png}",
         "--window-size=1400,900", page.as_uri()],
        check=True, capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not blank
    if os.environ.get("SHARDC_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["SHARDC_KEEP_SCREENSHOT"])
