import Foundation
import Hummingbird
import HummingbirdWebSocket
import Synchronization
import Testing
@testable import WhisperClient
import WhisperProtocol
import WhisperShared

/// The SDK's session against a gateway that lies about its queue: a stand-in on the
/// WebSocket answers every `fetch_pending` with a new message and a cursor of its own
/// choosing, and the walk must end (docs/sdk.md, the walk of the pending queue).
@Suite(.serialized, .stopsSessions) struct HostileGatewayTests {
    /// How the stand-in picks the next cursor from the one asked with (nil: the first page).
    enum Cursors: String, CaseIterable, Sendable {
        /// The same cursor again and again.
        case repeated
        /// Each page's cursor before the one asked with.
        case backwards
        /// Each page's cursor after the last, for ever.
        case endless

        func next(after asked: String?) -> String {
            let position = asked.flatMap(Format.cursorPosition)
            switch self {
            case .repeated: return "1000-1"
            case .backwards: return position.map { "\($0.ms)-\(max($0.seq, 1) - 1)" } ?? "1000-500"
            case .endless: return position.map { "\($0.ms)-\($0.seq + 1)" } ?? "1000-1"
            }
        }
    }

    /// The pages of the walk the stand-in answered.
    final class Pages: Sendable {
        let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
    }

    /// A gateway stand-in: the session's first `fetch_pending` (the one that binds the
    /// socket, `limit` 1) gets an empty page; each later one gets a new message from
    /// `sender` and the cursor `cursors` picks. Other frames are not answered.
    static func gateway(_ cursors: Cursors, to me: WhisperKeys, from sender: WhisperKeys, pages: Pages) async throws -> RunningService {
        let meId = WhisperID.generate(), senderId = WhisperID.generate()
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws("/ws") { inbound, outbound, _ in
            for try await frame in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = frame,
                      let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any],
                      object["type"] as? String == "fetch_pending", let requestId = object["requestId"] as? String else { continue }
                let payload = object["payload"] as? [String: Any] ?? [:]
                let page: PendingMessages
                if payload["limit"] as? Int == 1 {
                    page = PendingMessages(messages: [], nextCursor: nil)
                } else {
                    let number = pages.count.withLock { count in
                        count += 1
                        return count
                    }
                    let message = MessageCrypto.makeMessage(
                        Array("page \(number)".utf8), from: (senderId, sender), to: me.peerKeys(whisperId: meId), sessionToken: ""
                    )
                    page = PendingMessages(messages: [MessageReceived(message.fields)], nextCursor: cursors.next(after: payload["cursor"] as? String))
                }
                try await outbound.write(.text(String(decoding: ServerFrameCodec.encode(page, requestId: requestId), as: UTF8.self)))
            }
        }
        return try await RunningService.start { listening in
            let app = Application(
                router: Router(), server: .http1WebSocketUpgrade(webSocketRouter: router),
                configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { await listening($0.localAddress?.port ?? 0) }, logger: TestServers.logger
            )
            return ServiceAssembly(services: [app], logger: TestServers.logger, gracePeriod: .seconds(5))
        }
    }

    @Test(arguments: Cursors.allCases)
    func aWalkOfThePendingQueueEndsWhateverCursorsTheServerHandsOut(_ cursors: Cursors) async throws {
        let me = try WhisperKeys(mnemonic: BIP39.generateMnemonic()), sender = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let pages = Pages()
        try await Self.gateway(cursors, to: me, from: sender, pages: pages).running { gateway in
            let url = "ws://127.0.0.1:\(gateway.port)/ws"
            // Nothing listens at the HTTP addresses: the directory checks fail quietly. The
            // session is far from its end, so the first frame binds it (no refresh).
            let closed = "http://127.0.0.1:\(try TestServers.freePort())"
            let session = TestSessions.track(WhisperSession(
                configuration: .init(gateways: [url], deviceId: RandomID.uuid(), platform: .ios), keys: me,
                credentials: SessionCredentials(
                    whisperId: WhisperID.generate(), sessionToken: "session-token", expiresAt: Clock.millisecondsNow() + 30 * 86_400_000
                ),
                api: WhisperAPI(endpoints: WhisperEndpoints(websocket: url, auth: closed, attachments: closed, turn: closed)), logger: TestServers.logger
            ))
            let watcher = WhisperSessionTests.Watcher(session, acknowledging: false)
            defer { watcher.cancel() }
            await session.start()
            // The session is connected once its first walk is over.
            try await waitUntil(timeout: .seconds(60)) { watcher.connections(to: url) >= 1 }
            let walked = pages.value
            switch cursors {
            case .repeated, .backwards:
                // The second page's cursor does not move on from the first: not followed.
                #expect(walked == 2)
            case .endless:
                #expect(walked == WhisperSession.walkPagesMax)
            }
            // Every page's message was shown once, and the walk asked for nothing more.
            try await waitUntil { watcher.messages.withLock { $0.count } == walked }
            #expect(pages.value == walked)
            await session.stop()
        }
    }
}
