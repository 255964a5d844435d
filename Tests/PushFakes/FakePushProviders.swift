import _CryptoExtras
import Crypto
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import PushSenderService
import Synchronization
import SwiftASN1
import X509

/// Local stand-ins for APNs and FCM, for the tests and the push benchmark.

/// A certificate authority made for one test, and a server certificate it signed for
/// 127.0.0.1. The push-sender trusts the CA through `PUSH_TLS_EXTRA_ROOTS`, as an
/// operator would configure it; verification stays on.
public struct TestCertificates: Sendable {
    public let caPEM: String
    public let serverCertificate: NIOSSLCertificate
    public let serverKey: NIOSSLPrivateKey
    /// The CA's PEM in a file, for the setting.
    public let caPath: String
    /// The server's certificate and key as PEM files, for servers that read files
    /// (redis-server's TLS).
    public let serverCertificatePath: String
    public let serverKeyPath: String

    /// Deletes the three files; every test that makes certificates calls it when done.
    public func removeFiles() {
        for path in [caPath, serverCertificatePath, serverKeyPath] { try? FileManager.default.removeItem(atPath: path) }
    }

    /// A CA and a server certificate for 127.0.0.1, also written to files in the
    /// temporary directory (`removeFiles`).
    public static func make() throws -> TestCertificates {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("Whisper test CA") }
        let now = Date()
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86_400, issuer: caName, subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(caKey)
        )
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 86_400, issuer: caName,
            subject: try DistinguishedName { CommonName("127.0.0.1") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])), .dnsName("localhost")])
                try ExtendedKeyUsage([.serverAuth])
            },
            issuerPrivateKey: .init(caKey)
        )
        let caPEM = try ca.serializeAsPEM().pemString
        let serverPEM = try server.serializeAsPEM().pemString
        let stem = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-test-\(UUID().uuidString)").path
        try caPEM.write(toFile: stem + "-ca.pem", atomically: true, encoding: .utf8)
        try serverPEM.write(toFile: stem + "-server.pem", atomically: true, encoding: .utf8)
        try serverKey.pemRepresentation.write(toFile: stem + "-server.key", atomically: true, encoding: .utf8)
        return TestCertificates(
            caPEM: caPEM,
            serverCertificate: try NIOSSLCertificate(bytes: Array(serverPEM.utf8), format: .pem),
            serverKey: try NIOSSLPrivateKey(bytes: Array(serverKey.pemRepresentation.utf8), format: .pem),
            caPath: stem + "-ca.pem", serverCertificatePath: stem + "-server.pem", serverKeyPath: stem + "-server.key"
        )
    }
}

/// One request a fake provider received.
public struct ProviderRequest: Sendable {
    public var method: String
    public var path: String
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// When it arrived (ms since 1970).
    public var receivedAt: Int64

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    }
}

/// What a fake answers: a status, headers and a body; or nothing at all (a stall).
public struct ProviderReply: Sendable {
    public var status: Int
    public var headers: [(String, String)] = []
    public var body: String = ""
    public var stall = false
    /// After the answer, end the connection with GOAWAY (as providers do when they
    /// shed or recycle connections).
    public var goAway = false

    public init(status: Int, headers: [(String, String)] = [], body: String = "", stall: Bool = false, goAway: Bool = false) {
        self.status = status
        self.headers = headers
        self.body = body
        self.stall = stall
        self.goAway = goAway
    }

    public static let ok = ProviderReply(status: 200)
}

/// A local HTTP/2 server over TLS (ALPN `h2`) that records every request and answers
/// as its `responder` says. Speaks what APNs and FCM speak on the wire; the test's
/// responder checks and scripts the answers.
public final class FakeHTTP2Server: Sendable {
    public let port: Int
    private let channel: any Channel
    private let log = RequestLog()
    /// Requests received, in order.
    public var requests: [ProviderRequest] { log.list.withLock { $0 } }
    public var requestCount: Int { log.list.withLock { $0.count } }
    /// TCP connections accepted so far.
    public var connectionCount: Int { log.connections.load(ordering: .relaxed) }

    final class RequestLog: Sendable {
        let list = Mutex<[ProviderRequest]>([])
        let connections = Atomic<Int>(0)
    }

    public init(certificates: TestCertificates, responder: @escaping @Sendable (ProviderRequest) async -> ProviderReply) async throws {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(certificates.serverCertificate)], privateKey: .privateKey(certificates.serverKey)
        )
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let log = log
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                log.connections.add(1, ordering: .relaxed)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }.flatMap {
                    channel.configureHTTP2Pipeline(mode: .server) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandlers([
                                HTTP2FramePayloadToHTTP1ServerCodec(),
                                RecordingHandler(record: { request in log.list.withLock { $0.append(request) } }, responder: responder),
                            ])
                        }
                    }.map { _ in }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    public var baseURL: String { "https://127.0.0.1:\(port)" }

    public func stop() async {
        try? await channel.close()
    }
}

/// Collects one HTTP/2 stream's request (as HTTP/1 parts) and writes the reply.
private final class RecordingHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let record: @Sendable (ProviderRequest) -> Void
    let responder: @Sendable (ProviderRequest) async -> ProviderReply
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(record: @escaping @Sendable (ProviderRequest) -> Void, responder: @escaping @Sendable (ProviderRequest) async -> ProviderReply) {
        self.record = record
        self.responder = responder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(var buffer):
            body += buffer.readBytes(length: buffer.readableBytes) ?? []
        case .end:
            guard let head else { return }
            let request = ProviderRequest(
                method: head.method.rawValue, path: head.uri, headers: head.headers.map { ($0.name, $0.value) }, body: body,
                receivedAt: Int64(Date().timeIntervalSince1970 * 1000)
            )
            record(request)
            let responder = responder
            let loop = context.eventLoop
            let bound = NIOLoopBound((context, self), eventLoop: loop)
            Task {
                let reply = await responder(request)
                loop.execute {
                    let (context, handler) = bound.value
                    handler.write(reply, on: context)
                }
            }
        }
    }

    private func write(_ reply: ProviderReply, on context: ChannelHandlerContext) {
        guard !reply.stall else { return }
        var headers = HTTPHeaders(reply.headers)
        let bytes = ByteBuffer(string: reply.body)
        headers.add(name: "content-length", value: "\(bytes.readableBytes)")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: .init(statusCode: reply.status), headers: headers))), promise: nil)
        if bytes.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if reply.goAway, let connection = context.channel.parent {
            let goAway = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .maxID, errorCode: .noError, opaqueData: nil))
            connection.writeAndFlush(goAway).whenComplete { _ in connection.close(promise: nil) }
        }
    }
}

/// Keys the fakes check the push-sender's JWTs with.
public struct ProviderKeys: Sendable {
    public let apnsKey = P256.Signing.PrivateKey()
    public let apnsKeyID = "ABC123DEFG"
    public let teamID = "TEAM123456"
    public let fcmKey: _RSA.Signing.PrivateKey

    public init() throws {
        fcmKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
    }

    /// Verifies an APNs provider token: ES256 with the team's key, `kid` and `iss` right,
    /// issued within the last hour. Returns its `iat`.
    public func verifyAPNs(_ authorization: String?) async -> Date? {
        guard let authorization, authorization.hasPrefix("bearer ") else { return nil }
        let token = String(authorization.dropFirst("bearer ".count))
        let keys = JWTKeyCollection()
        guard let publicKey = try? ES256PublicKey(pem: apnsKey.publicKey.pemRepresentation) else { return nil }
        await keys.add(ecdsa: publicKey, kid: JWKIdentifier(string: apnsKeyID))
        guard let claims = try? await keys.verify(token, as: APNsClaims.self), claims.iss.value == teamID,
              abs(claims.iat.value.timeIntervalSinceNow) < 3600,
              Self.header(of: token)?["kid"] as? String == apnsKeyID, Self.header(of: token)?["alg"] as? String == "ES256" else { return nil }
        return claims.iat.value
    }

    /// Verifies an FCM OAuth assertion (RS256 with the service account's key, its claims).
    public func verifyFCMAssertion(_ assertion: String, email: String, audience: String) async -> Bool {
        let keys = JWTKeyCollection()
        guard let publicKey = try? Insecure.RSA.PublicKey(pem: fcmKey.publicKey.pemRepresentation) else { return false }
        await keys.add(rsa: publicKey, digestAlgorithm: .sha256)
        guard let claims = try? await keys.verify(assertion, as: AssertionClaims.self) else { return false }
        return claims.iss.value == email && claims.aud.value.contains(audience)
            && claims.scope == "https://www.googleapis.com/auth/firebase.messaging" && Self.header(of: assertion)?["alg"] as? String == "RS256"
    }

    static func header(of token: String) -> [String: Any]? {
        guard let part = token.split(separator: ".").first else { return nil }
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    struct APNsClaims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim
        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    struct AssertionClaims: JWTPayload {
        var iss: IssuerClaim
        var scope: String
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) throws {
            try exp.verifyNotExpired()
        }
    }

    /// The `.p8` file of the APNs key (PKCS#8 PEM, as Apple hands it out), in the
    /// temporary directory: the caller deletes it when done.
    public func writeAPNsKey() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-test-apns-\(UUID().uuidString).p8").path
        try apnsKey.pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    public func serviceAccount(tokenURI: String) -> PushSenderSettings.ServiceAccount {
        PushSenderSettings.ServiceAccount(
            projectID: "whisper-test", clientEmail: "push@whisper-test.iam.gserviceaccount.com",
            privateKeyPEM: fcmKey.pemRepresentation, tokenURI: tokenURI
        )
    }
}
