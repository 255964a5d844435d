#!/usr/bin/env python3
"""Two devices of one listener profile on the live-text listener page, in headless Chromium.

Run by LiveBrowserTests against a running stack whose SDK Whisperer answers the pages. A
phone-sized browser (the phone) asks to join as Grandma and is let in; it makes a "use on
another device" link; a second browser context (the laptop) opens that link, finds the
profile's name filled in, asks, and is let in at once; both read the text; both list the
conversation. The test then lets the profile go: both pages say so. The laptop renames
the profile and the phone shows the new name. Files in --artifacts tell the test where
the flow is ("both-reading"). With --join-code, a browser instead opens the link with a
code another device (the command-line client) made, and checks that it joined that
profile (--expect: the text it shows). Exit status 0 when every check held; otherwise 1.
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
    parser.add_argument("--join-code", help="join the profile of this code, and check --expect")
    parser.add_argument("--expect", help="what the page then says of its profile")
    args = parser.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    steps = []
    link = f"{args.base}/listen/{args.conversation}"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        screen = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
        errors = []
        pages = {}

        def open_device(name):
            page = browser.new_context(**screen).new_page()
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            pages[name] = page
            return page

        def shot(page, name):
            page.screenshot(path=os.path.join(args.artifacts, f"{len(steps) + 1:02d}-{name}.png"), full_page=True)
            steps.append(name)

        def wait(page, selector, predicate_js, what, prop="textContent"):
            try:
                page.wait_for_function(
                    f"() => {{ const e = document.querySelector('{selector}'); return !!e && ({predicate_js})(e.{prop}); }}", timeout=20000)
            except Exception:
                shot(page, "failed")
                raise AssertionError(f"{what}: {selector} is {page.locator(selector).text_content()!r}")

        try:
            if args.join_code:
                browser_device = open_device("browser")
                browser_device.goto(f"{link}#join={args.join_code}")
                wait(browser_device, "#profileName", f"t => t.includes({json.dumps(args.expect)})", "the browser did not join the terminal's profile")
                wait(browser_device, "#conversations", "t => t.includes('Kitchen table')", "the browser does not list the profile's conversation")
                shot(browser_device, "joined-from-terminal")
                print(json.dumps({"steps": steps}))
                return 0
            phone = open_device("phone")
            phone.goto(link)
            wait(phone, "#profileName", "t => t.includes('no name')", "the phone's new profile is not shown")
            phone.fill("#name", "Grandma")
            phone.click("#ask")
            wait(phone, "#status", "t => t.includes('Listening')", "the phone is not let in")
            wait(phone, "#profileName", "t => t.includes('You are Grandma')", "the name was not kept in the profile")
            wait(phone, "#conversations", "t => t.includes('Kitchen table')", "the phone does not list the conversation")
            phone.click("#share")
            wait(phone, "#shareLink", "v => v.includes('#join=')", "no link for another device", prop="value")
            shared = phone.input_value("#shareLink")
            shot(phone, "phone-shares")

            laptop = open_device("laptop")
            laptop.goto(shared)
            wait(laptop, "#profileName", "t => t.includes('You are Grandma, on 2 devices')", "the laptop did not join the profile")
            if laptop.input_value("#name") != "Grandma":
                raise AssertionError("the laptop does not offer the profile's name")
            wait(phone, "#profileName", "t => t.includes('on 2 devices')", "the phone did not hear of its second device")
            laptop.click("#ask")
            wait(laptop, "#status", "t => t.includes('Listening')", "the laptop is not let in at once")
            for page in (phone, laptop):
                wait(page, "#live", "t => t === 'for both of you'", "the text does not reach both")
            wait(laptop, "#conversations", "t => t.includes('Kitchen table') && t.includes('live now')", "the laptop does not list the conversation")
            if not laptop.evaluate("document.documentElement.scrollWidth <= window.innerWidth"):
                raise AssertionError("the page scrolls sideways on a phone")
            shot(laptop, "both-reading")
            open(os.path.join(args.artifacts, "both-reading"), "w").close()

            for page in (phone, laptop):
                wait(page, "#status", "t => t.includes('removed you')", "a device was not let go with its profile")
                wait(page, "#conversations", "t => !t.includes('Kitchen table')", "a conversation that let the profile go is still listed")
            shot(phone, "let-go")

            laptop.fill("#newName", "Grandma Ada")
            laptop.click("#rename button")
            wait(phone, "#profileName", "t => t.includes('You are Grandma Ada')", "the phone does not show the new name")
            shot(phone, "renamed")
            if errors:
                raise AssertionError(f"console errors: {errors}")
        except AssertionError as failure:
            print(json.dumps({"steps": steps, "failed": str(failure)}))
            return 1
        finally:
            browser.close()
    print(json.dumps({"steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
