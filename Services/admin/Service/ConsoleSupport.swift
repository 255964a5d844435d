import Foundation
import HTTPTypes
import Hummingbird
import WhisperShared

/// Console sessions in Redis. The cookie holds a random id; Redis holds only its
/// SHA-256 (`console:{<digest>}` = `<operator> <csrf token>`), for 8 hours from sign-in.
struct ConsoleSessions: Sendable {
    let redis: RedisClient
    static let lifetime: Duration = .seconds(8 * 3_600)

    struct Session: Sendable {
        var `operator`: String
        var csrf: String
    }

    static func key(_ id: String) -> String {
        "console:{\(SessionStore.digest(id))}"
    }

    func create(for operatorName: String) async throws -> (id: String, session: Session) {
        let id = Base64URL.encode(SecureBytes.random(32))
        let session = Session(operator: operatorName, csrf: Base64URL.encode(SecureBytes.random(24)))
        try await redis.send("SET", Self.key(id), "\(session.operator) \(session.csrf)", "PX", Int(Self.lifetime.milliseconds))
        return (id, session)
    }

    func lookup(_ id: String) async throws -> Session? {
        guard id.utf8.count == 43, id.utf8.allSatisfy(Self.isBase64URL),
              let value = try await redis.send("GET", Self.key(id)).string else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return nil }
        return Session(operator: parts[0], csrf: parts[1])
    }

    func end(_ id: String) async throws {
        try await redis.send("DEL", Self.key(id))
    }

    static func isBase64URL(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }
}

/// Reading what a browser sends: cookies and `application/x-www-form-urlencoded` bodies.
enum ConsoleRequest {
    static let maxFormBytes = 16 * 1_024

    static func cookie(_ name: String, in request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if parts.count == 2, parts[0] == name { return parts[1] }
            }
        }
        return nil
    }

    /// The form's fields (the last value of a repeated name wins); nil when the body
    /// is too large or not a form.
    static func form(_ request: Request) async throws -> [String: String] {
        guard let buffer = try? await request.body.collect(upTo: maxFormBytes) else {
            throw WhisperHTTPError(.invalidPayload, "the form is over \(maxFormBytes) bytes")
        }
        var fields: [String: String] = [:]
        for pair in String(buffer: buffer).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            guard let name = parts.first.map(decode), !name.isEmpty else { continue }
            fields[name] = parts.count == 2 ? decode(parts[1]) : ""
        }
        return fields
    }

    /// A form was sent from this console's own pages: its `Origin`, when the browser
    /// gives one, is this host.
    static func sameOrigin(_ request: Request) -> Bool {
        guard let origin = request.headers[.origin] else { return true }
        guard let host = request.head.authority else { return false }
        return origin == "http://\(host)" || origin == "https://\(host)"
    }
}

/// Building the pages: every value from outside goes through `escape`.
enum HTML {
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// A moment as `2026-12-07 05:30:12 UTC`, in a `<time>` element carrying its ISO 8601
    /// form: every time on the console is UTC and says so.
    static func time(_ milliseconds: Int64?) -> String {
        guard let milliseconds else { return "—" }
        // ISO 8601 format styles are in UTC unless told otherwise.
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
        let shown = date.formatted(.iso8601.year().month().day().dateSeparator(.dash).dateTimeSeparator(.space).time(includingFractionalSeconds: false).timeSeparator(.colon))
        return "<time datetime=\"\(date.formatted(.iso8601))\">\(shown) UTC</time>"
    }

    /// When something ends (a ban's `expiresAt`): the moment and how far off it is, or
    /// `until lifted` for no end.
    static func until(_ milliseconds: Int64?, now: Int64) -> String {
        guard let milliseconds else { return "until lifted" }
        let left = milliseconds - now
        guard left > 0 else { return "\(time(milliseconds)) (ended)" }
        return "\(time(milliseconds)) (in \(span(left)))"
    }

    /// A length of time in words: `3 d 4 h`, `5 h 12 min`, `40 min`, `under a minute`.
    static func span(_ milliseconds: Int64) -> String {
        let minutes = milliseconds / 60_000, hours = minutes / 60, days = hours / 24
        if days > 0 { return "\(days) d \(hours % 24) h" }
        if hours > 0 { return "\(hours) h \(minutes % 60) min" }
        return minutes > 0 ? "\(minutes) min" : "under a minute"
    }

    static func query(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    /// The page around `body`: navigation, the sign-out form, the operator's name.
    static func page(title: String, session: ConsoleSessions.Session?, notice: String? = nil, error: String? = nil, body: String) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title)) · Whisper console</title><link rel="stylesheet" href="/console/style.css">
            <link rel="icon" href="/console/icon.svg" type="image/svg+xml"></head><body>
            <header><strong>Whisper console</strong>
            """
        if let session {
            html += """
                <nav><a href="/console">Figures</a><a href="/console/reports">Reports</a><a href="/console/bans">Bans</a>\
                <a href="/console/users">Users</a><a href="/console/audit">Audit log</a></nav>
                <form method="post" action="/console/logout" class="signout"><input type="hidden" name="csrf" value="\(escape(session.csrf))">\
                <span id="operator">\(escape(session.operator))</span> <button type="submit">Sign out</button></form>
                """
        }
        html += "</header><main><h1>\(escape(title))</h1>"
        if let notice { html += "<p class=\"notice\" role=\"status\">\(escape(notice))</p>" }
        if let error { html += "<p class=\"error\" role=\"alert\">\(escape(error))</p>" }
        html += body + "</main></body></html>\n"
        return html
    }

    static func csrfField(_ session: ConsoleSessions.Session) -> String {
        "<input type=\"hidden\" name=\"csrf\" value=\"\(escape(session.csrf))\">"
    }

    /// A 200 (or `status`) HTML answer with the console's headers: nothing cached,
    /// nothing loaded from elsewhere, no framing, no referrer to other sites.
    static func response(_ html: String, status: HTTPResponse.Status = .ok, cookies: [String] = []) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        for cookie in cookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func redirect(to location: String, cookies: [String] = []) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        for cookie in cookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: .seeOther, headers: headers)
    }

    static var securityHeaders: HTTPFields {
        var headers = HTTPFields()
        headers[.cacheControl] = "no-store"
        headers[.contentSecurityPolicy] =
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        // `same-origin`, not `no-referrer`: with no referrer at all, browsers send
        // `Origin: null` on form posts, and the origin check could not tell them apart.
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        return headers
    }

    static let icon = """
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1d3b53"/>\
        <path d="M3 5l2 7 3-5 3 5 2-7" stroke="#fff" stroke-width="1.5" fill="none"/></svg>
        """

    static let stylesheet = """
        :root { font-family: system-ui, sans-serif; color: #1d232a; background: #f6f7f9; }
        body { margin: 0; }
        header { display: flex; gap: 1.5rem; align-items: center; padding: .75rem 1.5rem; background: #1d3b53; color: #fff; flex-wrap: wrap; }
        header a { color: #fff; margin-right: 1rem; text-decoration: none; }
        header a:hover { text-decoration: underline; }
        .signout { margin-left: auto; }
        main { padding: 1rem 1.5rem 3rem; max-width: 72rem; }
        table { border-collapse: collapse; width: 100%; background: #fff; margin: .5rem 0 1.5rem; }
        th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid #dde1e6; vertical-align: top; font-size: .92rem; }
        th { background: #eef1f4; }
        .figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(12rem, 1fr)); gap: .75rem; }
        .figure { background: #fff; padding: .75rem 1rem; border: 1px solid #dde1e6; border-radius: 6px; }
        .figure .value { font-size: 1.6rem; font-weight: 600; }
        .notice { background: #e3f4e6; border: 1px solid #8cc79a; padding: .5rem .75rem; }
        .error { background: #fbe5e5; border: 1px solid #d98c8c; padding: .5rem .75rem; }
        form.inline { display: inline; }
        fieldset { background: #fff; border: 1px solid #dde1e6; margin: 1rem 0; }
        label { display: block; margin: .35rem 0; }
        input[type=text], input[type=password], select, textarea { font: inherit; padding: .3rem; min-width: 18rem; }
        button { font: inherit; padding: .3rem .8rem; cursor: pointer; }
        .banned { color: #a32020; font-weight: 600; }
        code { font-size: .9rem; }
        """
}
