"""Open a report page in headless Chromium as a person would (Debian's chromium and
chromedriver through selenium). Shared by the report tests and
benchmarks/report_screenshot.py.

Service('/usr/bin/chromedriver') is given explicitly so that selenium-manager never
tries to download a driver or a browser.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator, List, Tuple

CHROMIUM = os.environ.get("ZL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ZL_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser_missing() -> str:
    """Why no browser can be driven here ('' when one can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).is_file() or shutil.which(path)):
            return f"{path} not found (apt-get install -y chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return ""


class Page:
    def __init__(self, driver):
        self.driver = driver

    def table(self, table_id: str):
        return self.driver.find_element("id", table_id)

    def shown_rows(self, table_id: str) -> int:
        return int(self.table(table_id).get_attribute("data-shown"))

    def column(self, table_id: str, key: str) -> List[str]:
        """The texts of one column on the table's current page."""
        table = self.table(table_id)
        heads = [th.get_attribute("data-key") for th in table.find_elements("css selector", "thead th")]
        i = heads.index(key) + 1
        return [td.text for td in table.find_elements("css selector", f"tbody tr td:nth-child({i})")]

    def click_header(self, table_id: str, key: str) -> None:
        self.table(table_id).find_element("css selector", f'thead th[data-key="{key}"]').click()

    def type_filter(self, table_id: str, text: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        box = self.table(table_id).find_element("css selector", "input.zl-filter")
        box.clear()
        if text:
            box.send_keys(text)
        else:  # clear() fires no input event
            self.driver.execute_script(
                "arguments[0].dispatchEvent(new Event('input'))", box)
        # The filter runs 120 ms after the last key, then says what it applied.
        WebDriverWait(self.driver, 10).until(
            lambda d: self.table(table_id).get_attribute("data-filter") == text)

    def plot_sizes(self) -> List[Tuple[int, int]]:
        """Rendered width x height of every inline SVG that holds drawn paths."""
        out = []
        for svg in self.driver.find_elements("css selector", ".plot svg"):
            if svg.find_elements("css selector", "path"):
                out.append((svg.size["width"], svg.size["height"]))
        return out

    def screenshot(self, path: Path, max_height: int = 8000) -> None:
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        width = self.driver.get_window_size()["width"]
        self.driver.set_window_size(width, min(int(height) + 40, max_height))
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))


@contextlib.contextmanager
def open_page(html: Path, width: int = 1500, height: int = 1100) -> Iterator[Page]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(Path(html).resolve().as_uri())
        WebDriverWait(driver, 20).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
            and d.find_elements("css selector", "#rows-table[data-shown]"))
        yield Page(driver)
    finally:
        driver.quit()
