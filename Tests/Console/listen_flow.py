#!/usr/bin/env python3
"""The live-text listener page in headless Chromium (Debian's package, driven by Playwright).

Run by LiveBrowserTests against a running stack whose SDK Whisperer answers the page:
opens the shared link on a phone-sized screen, asks to join as Ada, waits to be let in
and reads the text as it is typed (past text and live text), tells the test it saw the
first text (a file in --artifacts), then reads a revision; then a second browser asks
as Eve and is refused. Asserts on the rendered page; saves a screenshot of each step.
Exit status 0 when every check held; otherwise 1 with the failed check.
"""
import argparse
import json
import os
import sys

from playwright.sync_api import sync_playwright


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the gateway, http://host:port")
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    steps = []
    link = f"{args.base}/listen/{args.conversation}"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        phone = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
        ada = browser.new_context(**phone).new_page()
        errors = []
        ada.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page = ada

        def shot(name):
            page.screenshot(path=os.path.join(args.artifacts, f"{len(steps) + 1:02d}-{name}.png"), full_page=True)
            steps.append(name)

        def check(condition, what):
            if not condition:
                shot("failed")
                raise AssertionError(what)

        def wait_text(selector, predicate_js, what):
            try:
                page.wait_for_function(f"() => {{ const e = document.querySelector('{selector}'); return !!e && ({predicate_js})(e.textContent); }}", timeout=20000)
            except Exception:
                shot("failed")
                raise AssertionError(f"{what}: {selector} is {page.locator(selector).text_content()!r}")

        try:
            response = page.goto(link)
            check(response.status == 200, f"the link answered {response.status}")
            cookies = [c for c in ada.context.cookies() if c["name"] == "whisper_live_device"]
            check(len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict", f"no device cookie: {cookies}")
            check(page.locator("#status").get_attribute("role") == "status", "the status line is not announced")
            check(page.locator("#past").get_attribute("role") == "log", "past text is not a log")
            page.fill("#name", "Ada")
            shot("join")
            page.click("#ask")
            wait_text("#status", "t => t.includes('Listening')", "not let in")
            check(page.locator("#join").is_hidden(), "the join form is still shown once let in")
            # Typed by the Whisperer after it let Ada in: a line of past text, then live text.
            wait_text("#past", "t => t.includes('Good evening')", "no past text")
            wait_text("#live", "t => t === 'Hello there'", "no live text")
            check(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the page scrolls sideways on a phone")
            shot("reading")
            open(os.path.join(args.artifacts, "seen-first"), "w").close()
            # The Whisperer revises: a lower offset replaces what followed it.
            wait_text("#live", "t => t === 'Hello world'", "the revision is not shown")
            shot("revised")

            eve = browser.new_context(**phone).new_page()
            page = eve
            eve.goto(link)
            eve.fill("#name", "Eve")
            eve.click("#ask")
            wait_text("#status", "t => t.includes('did not let you in')", "the refusal is not shown")
            check(eve.locator("#conversation").is_hidden(), "a refused listener sees the conversation")
            shot("refused")
            check(not errors, f"console errors: {errors}")
        except AssertionError as failure:
            print(json.dumps({"steps": steps, "failed": str(failure)}))
            return 1
        finally:
            browser.close()
    print(json.dumps({"steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
