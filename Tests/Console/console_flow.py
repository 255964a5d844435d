#!/usr/bin/env python3
"""The operator console in headless Chromium (Debian's package, driven by Playwright).

Run by ConsoleTests against a running admin service: signs in, reviews a report, bans
an identity from the page (cancelled once, then confirmed), finds the ban in the bans
list and the audit log, lists and searches identities, looks at the user's page, lifts
the ban (confirmed), checks that a form without its CSRF token changes
nothing, signs out. Asserts on the rendered pages; saves a screenshot of each step in
--artifacts. Exit status 0 when every check held; otherwise 1 with the failed check.
"""
import argparse
import json
import os
import sys

from playwright.sync_api import sync_playwright


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--operator", required=True)
    parser.add_argument("--target", required=True, help="a reported identity to ban from the page")
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    steps = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        failures = []
        console_errors = []
        page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)

        def shot(name):
            path = os.path.join(args.artifacts, f"{len(steps) + 1:02d}-{name}.png")
            page.screenshot(path=path, full_page=True)
            steps.append(name)

        def check(condition, what):
            if not condition:
                failures.append(what)
                shot("failed")
                raise AssertionError(what)

        try:
            # Not signed in: the console sends the browser to the sign-in page.
            page.goto(f"{args.base}/console")
            check(page.url.endswith("/console/login"), f"not sent to sign in: {page.url}")
            check(page.locator("h1").inner_text() == "Sign in", "no sign-in heading")
            shot("sign-in")

            page.fill("input[name=token]", "not-a-token-" + "x" * 40)
            page.click("#login button[type=submit]")
            check("That is not an admin token." in page.locator(".error").inner_text(), "a wrong token was not refused on the page")
            shot("wrong-token")
            # The refusal is a 401, which the browser reports as a failed load: expected.
            console_errors.clear()

            page.fill("input[name=token]", args.token)
            page.click("#login button[type=submit]")
            check(page.url.endswith("/console"), f"not on the figures page after sign-in: {page.url}")
            check(page.locator("#operator").inner_text() == args.operator, "the operator's name is not shown")
            figures = page.locator(".figure").all_inner_texts()
            check(any("Identities" in f for f in figures), f"no identities figure: {figures}")
            identities = next(f for f in figures if f.endswith("Identities")).split("\n")[0]
            check(identities.isdigit() and int(identities) >= 2, f"identities figure is {identities!r}")
            shot("figures")

            # The reports queue shows the target's report; dismiss it.
            page.click("nav >> text=Reports")
            group = page.locator(f"section.report-group[data-whisper-id='{args.target}']")
            check(group.count() == 1, "the reported identity is not in the reports queue")
            check("spam" in group.locator("h2").inner_text(), "the report's reason is not shown")
            shot("reports")
            group.locator("input[name=note]").first.fill("looked at it")
            group.locator("button[value=dismissed]").first.click()
            check("Report reviewed." in page.locator(".notice").inner_text(), "no notice after the review")
            check(page.locator(f"section.report-group[data-whisper-id='{args.target}']").count() == 0, "the reviewed report is still open")

            # Ban the target from the bans page.
            page.click("nav >> text=Bans")
            page.fill("#ban-form input[name=whisperId]", args.target)
            page.fill("#ban-form input[name=reason]", "spam from the console")
            page.fill("#ban-form input[name=durationHours]", "24")
            page.click("#ban-form button[type=submit]")
            # A confirmation step first: nothing is banned until it is confirmed.
            check(page.locator("h1").inner_text() == f"Ban {args.target}?", f"no confirmation step: {page.locator('h1').inner_text()}")
            details = page.locator("#confirm-details").inner_text()
            check("spam from the console" in details, f"the confirmation does not show the reason: {details}")
            check(" UTC (in 23 h " in details or " UTC (in 1 d 0 h)" in details, f"the confirmation does not say until when: {details}")
            shot("confirm-ban")
            page.click("#cancel")
            check(page.locator(f"#bans tr[data-whisper-id='{args.target}']").count() == 0, "a cancelled ban was made")
            page.fill("#ban-form input[name=whisperId]", args.target)
            page.fill("#ban-form input[name=reason]", "spam from the console")
            page.click("#ban-form button[type=submit]")
            page.click("#confirm button[type=submit]")
            check(f"{args.target} is banned." in page.locator(".notice").inner_text(), "no notice after the ban")
            row = page.locator(f"#bans tr[data-whisper-id='{args.target}']")
            check(row.count() == 1, "the ban is not in the bans list")
            cells = row.locator("td").all_inner_texts()
            check(cells[1] == "spam from the console" and cells[2] == args.operator and cells[5] == "active", f"the ban row reads {cells}")
            check(cells[3].endswith(" UTC") and cells[4] == "until lifted", f"the ban's times read {cells[3:5]}")
            shot("banned")

            # The audit log has both actions under the operator's name.
            page.click("nav >> text=Audit log")
            rows = [r.split("\t") for r in page.locator("#audit tr").all_inner_texts()[1:]]
            actions = [(r[1], r[2], r[3]) for r in rows if len(r) >= 4]
            check((args.operator, "ban", args.target) in actions, f"the ban is not in the audit log: {actions}")
            check(any(a[0] == args.operator and a[1] == "report.review" for a in actions), "the review is not in the audit log")
            shot("audit")

            # The list of identities, newest first; then found by the start of the ID and by
            # a piece from its middle.
            page.click("nav >> text=Users")
            listed = page.locator("#users tr[data-whisper-id]")
            check(listed.count() >= 2, f"the users list shows {listed.count()} identities")
            check(page.locator(f"#users tr[data-whisper-id='{args.target}']").count() == 1, "the target is not in the users list")
            shot("users")
            for piece in (args.target[:8], args.target[9:13].lower()):
                page.fill("#user-search input[name=q]", piece)
                page.click("#user-search button[type=submit]")
                found = [r.get_attribute("data-whisper-id") for r in page.locator("#users tr[data-whisper-id]").all()]
                check(args.target in found, f"searching {piece!r} did not find the target: {found}")
                check(all(piece.upper() in f for f in found), f"searching {piece!r} found others: {found}")
            row = page.locator(f"#users tr[data-whisper-id='{args.target}']")
            check("banned" in row.inner_text(), f"the users list does not show the ban: {row.inner_text()}")

            # The user's page: banned, a device, what waits; no content anywhere.
            page.locator(f"#users tr[data-whisper-id='{args.target}'] a").click()
            check(page.url.endswith(f"/console/users?whisperId={args.target}"), f"the row did not open the user's page: {page.url}")
            check(page.locator("#standing").inner_text() == "banned", "the user page does not say banned")
            check(page.locator("#devices tr").count() >= 2, "no device on the user page")
            check(page.locator("#pending").inner_text().isdigit(), "no pending count")
            shot("user")

            # A form posted without its CSRF token changes nothing.
            forged = page.request.post(f"{args.base}/console/unban", form={"whisperId": args.target})
            check(forged.status == 403, f"a form without its CSRF token got {forged.status}")
            page.goto(f"{args.base}/console/bans")
            check(page.locator(f"#bans tr[data-whisper-id='{args.target}']").count() == 1, "the forged unban lifted the ban")

            # Lift it from the page, confirmed.
            page.locator(f"#bans tr[data-whisper-id='{args.target}'] button").click()
            check(page.locator("h1").inner_text() == f"Lift the ban of {args.target}?", "no confirmation before lifting")
            check(args.operator in page.locator("#confirm-details").inner_text(), "the confirmation does not say who banned")
            shot("confirm-lift")
            page.click("#confirm button[type=submit]")
            check("is lifted" in page.locator(".notice").inner_text(), "no notice after lifting")
            check(page.locator(f"#bans tr[data-whisper-id='{args.target}']").count() == 0, "the lifted ban is still listed")
            shot("lifted")

            page.click(".signout button")
            check(page.url.endswith("/console/login"), "sign-out did not end on the sign-in page")
            page.goto(f"{args.base}/console/bans")
            check(page.url.endswith("/console/login"), "the console still opens after sign-out")
            check(not console_errors, f"the browser reported errors: {console_errors}")
        except AssertionError:
            pass
        finally:
            browser.close()

    print(json.dumps({"steps": steps, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
