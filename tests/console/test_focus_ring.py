"""The keyboard focus ring of every link, button and field stands out from the background it is drawn on
by at least 3:1 (WCAG 2.2, 1.4.11 Non-text Contrast), measured in the browser on the computed styles."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page

from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest

WCAG_NON_TEXT = 3.0
# For each focusable element: its outline colour while focused, and the first opaque background behind it.
_RING_AND_BACKGROUND = """
elements => elements.map(element => {
  element.focus();
  const ring = getComputedStyle(element).outlineColor;
  let behind = element.parentElement;
  let background = "rgb(255, 255, 255)";
  while (behind) {
    const colour = getComputedStyle(behind).backgroundColor;
    if (colour !== "rgba(0, 0, 0, 0)" && colour !== "transparent") { background = colour; break; }
    behind = behind.parentElement;
  }
  return [element.outerHTML.slice(0, 60), ring, background];
})
"""


def _luminance(colour: str) -> float:
    red, green, blue = (int(part) / 255 for part in re.findall(r"\d+", colour)[:3])
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (red, green, blue)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_focus_ring_contrasts_at_least_3_to_1_with_what_is_behind_it(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "ana")
    operation_id = start_case(page, console, case_id="T-focus")
    weak: list[str] = []
    for path in (f"/proposals/{operation_id}", "/", "/start", "/operations"):
        page.goto(console.url(path))
        focusable = page.locator("a[href], button, input:not([type=hidden]), textarea, select")
        measured = focusable.evaluate_all(_RING_AND_BACKGROUND)
        assert measured, path
        weak += [
            f"{path} {element}: {_contrast(ring, background):.2f}:1"
            for element, ring, background in measured
            if _contrast(ring, background) < WCAG_NON_TEXT
        ]
    assert weak == []
