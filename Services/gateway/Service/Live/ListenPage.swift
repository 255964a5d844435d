import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import WhisperShared

/// The browser side of live text: the page a listener opens from a shared link
/// (`/listen/<conversationId>`), its script and style (served from here, nothing
/// fetched elsewhere; WebCrypto does the cryptography), and `POST /live/devices`, which
/// gives an app without an identity a listener device. A browser gets its device with
/// the page: a long-lived cookie (`LiveDevices`).
struct ListenPage: Sendable {
    let devices: LiveDevices
    /// Whether the request's client address may have a new device
    /// (`Limit.liveDevicesPerAddress`): devices are free to make otherwise, and each
    /// carries a socket past the sign-in deadline.
    let mayMakeDevice: @Sendable (Request, ClientRequestContext) -> Bool

    func register(on router: Router<ClientRequestContext>) {
        router.post("/live/devices") { request, context -> Response in
            guard mayMakeDevice(request, context) else {
                throw WhisperHTTPError(.rateLimited, Limit.liveDevicesPerAddress.refusal(retryAfterMs: nil))
            }
            let (deviceId, cookie) = devices.issue()
            let body = "{\"deviceId\":\"\(deviceId)\",\"cookie\":\"\(cookie)\"}"
            var headers = Self.commonHeaders
            headers[.contentType] = "application/json"
            headers[.setCookie] = devices.setCookie(cookie, secure: Self.isHTTPS(request))
            return Response(status: .created, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        router.get("/listen/assets/listener.js") { _, _ -> Response in
            Self.asset(WebAssets.listenerJs, type: "text/javascript; charset=utf-8")
        }
        router.get("/listen/assets/listener.css") { _, _ -> Response in
            Self.asset(WebAssets.listenerCss, type: "text/css; charset=utf-8")
        }
        router.get("/listen/:conversationId") { request, context -> Response in
            guard let id = context.parameters.get("conversationId"), Format.isUUID(id) else {
                throw HTTPError(.notFound, message: "no such conversation link")
            }
            var headers = Self.commonHeaders
            headers[.contentType] = "text/html; charset=utf-8"
            headers[.contentSecurityPolicy] =
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
            // A browser without a device gets one; one whose cookie was made under the
            // internal token being rotated out keeps its device under the new key.
            let known = devices.device(fromCookieHeaders: request.headers[values: .cookie])
            if let known, !known.current {
                headers[.setCookie] = devices.setCookie(devices.issue(known.id).cookie, secure: Self.isHTTPS(request))
            } else if known == nil, mayMakeDevice(request, context) {
                headers[.setCookie] = devices.setCookie(devices.issue(RandomID.uuid()).cookie, secure: Self.isHTTPS(request))
            }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: WebAssets.listenerHtml)))
        }
    }

    static let commonHeaders: HTTPFields = [.cacheControl: "no-store", HTTPField.Name("X-Content-Type-Options")!: "nosniff"]

    static func asset(_ text: String, type: String) -> Response {
        var headers = commonHeaders
        headers[.contentType] = type
        headers[.cacheControl] = "max-age=300"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// Whether the browser asked over HTTPS: the first proxy in front says so in
    /// `X-Forwarded-Proto` (the edge passes on what a TLS balancer in front of it set,
    /// or its own scheme). Believing a client here is safe: the header only makes its
    /// own cookie `Secure`.
    static func isHTTPS(_ request: Request) -> Bool {
        let proto = request.headers[HTTPField.Name("X-Forwarded-Proto")!] ?? ""
        return proto.split(separator: ",").first?.trimmingCharacters(in: .whitespaces).lowercased() == "https"
    }
}
