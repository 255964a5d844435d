// A complete minimal app on the SDK alone: two people, each with an identity made here
// and a `WhisperSession` that keeps its connection; Alice looks Bob's keys up (proven by
// the key directory), writes to him, Bob opens and acknowledges the message, Alice sees
// the receipt. Both show the key directory's alerts as an app must. docs/sdk.md.
//
//   whisper-example                          # a `scripts/up` stack on this machine
//   whisper-example --server https://chat.example.org
//   whisper-example --websocket ws://HOST:PORT/ws --auth-url http://HOST:PORT
//
// Exits 0 once the receipt came back, 1 after 60 s without it.
import Foundation
import WhisperClient

/// What one person's app shows, from its session's events.
actor Screen {
    let name: String
    private(set) var whisperId: String?
    private(set) var received: [String] = []
    private(set) var receipts = 0
    private(set) var alerts: [KeyTransparencyError] = []

    init(name: String) { self.name = name }

    func signedIn(_ credentials: SessionCredentials) {
        if whisperId == nil { print("\(name): signed in as \(credentials.whisperId)") }
        whisperId = credentials.whisperId
    }

    func show(_ text: String, from sender: String) {
        received.append(text)
        print("\(name): message from \(sender): \(text)")
    }

    func delivered(_ messageId: String) {
        receipts += 1
        print("\(name): \(messageId) was delivered")
    }

    /// A key directory check failed: the app must tell the person (and not write to
    /// a peer whose keys failed their proof).
    func alert(_ problem: KeyTransparencyError) {
        alerts.append(problem)
        print("\(name): KEY DIRECTORY ALERT: \(problem)")
    }
}

/// One person: keys from a new phrase, a session, and the loop over its events.
struct Person {
    let keys: WhisperKeys
    let session: WhisperSession
    let screen: Screen
    let api: WhisperAPI

    init(name: String, endpoints: WhisperEndpoints) throws {
        // A real app shows the phrase once, for the person to write down, and keeps the
        // device ID with the credentials (docs/sdk.md, "The device ID").
        keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        api = WhisperAPI(endpoints: endpoints)
        let configuration = WhisperSession.Configuration(
            gateways: [endpoints.websocket], deviceId: UUID().uuidString.lowercased(), platform: .android
        )
        session = WhisperSession(configuration: configuration, keys: keys, credentials: nil, api: api)
        screen = Screen(name: name)
    }

    func start() async {
        let (session, screen, keys, api) = (session, screen, keys, api)
        Task {
            for await event in session.events {
                switch event {
                case .credentials(let credentials):
                    await screen.signedIn(credentials)
                case .message(let message):
                    do {
                        // Verify, decrypt, store (here: show), then acknowledge.
                        let sender = try await session.connected { _, token in try await api.keys(of: message.from, sessionToken: token) }
                        guard let me = await screen.whisperId else { continue }
                        let plaintext = try MessageCrypto.open(message, by: (me, keys), sender: sender.keys)
                        await screen.show(String(decoding: plaintext, as: UTF8.self), from: message.from)
                        try await session.acknowledge(message)
                    } catch let problem as KeyTransparencyError {
                        await screen.alert(problem)
                    } catch {
                        print("\(screen.name): a message did not open: \(error)")
                    }
                case .receipt(let receipt):
                    await screen.delivered(receipt.messageId)
                case .directoryAlert(let problem):
                    await screen.alert(problem)
                default:
                    break
                }
            }
        }
        await session.start()
    }

    /// This person's Whisper ID, once the session signed in.
    func whisperId(within limit: Duration) async throws -> String {
        try await waitFor(limit, "\(screen.name) to sign in") { await screen.whisperId }
    }

    /// Looks the peer's keys up (proven by the key directory, or an alert) and sends.
    func write(_ text: String, to peerId: String) async throws -> String {
        guard let me = await screen.whisperId else { throw ExampleError("not signed in") }
        let peer: KeyLookup
        do {
            peer = try await session.connected { _, token in try await api.keys(of: peerId, sessionToken: token) }
        } catch let problem as KeyTransparencyError {
            await screen.alert(problem)
            throw problem
        }
        let message = MessageCrypto.makeMessage(Array(text.utf8), from: (me, keys), to: peer.keys, sessionToken: "")
        try await session.send(message)
        print("\(screen.name): sent \(message.messageId) to \(peerId)")
        return message.messageId
    }
}

struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Polls `value` until it is not nil, for at most `limit`.
func waitFor<T: Sendable>(_ limit: Duration, _ what: String, _ value: @Sendable () async -> T?) async throws -> T {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if let found = await value() { return found }
        try await Task.sleep(for: .milliseconds(100))
    }
    throw ExampleError("waited \(limit) for \(what)")
}

func endpoints(_ arguments: [String]) throws -> WhisperEndpoints {
    func value(_ name: String) -> String? {
        guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }
    if let server = value("--server") {
        guard let endpoints = WhisperEndpoints.edge(server) else { throw ExampleError("--server takes an https:// or http:// origin") }
        return endpoints
    }
    var endpoints = WhisperEndpoints.local()
    if let websocket = value("--websocket") { endpoints.websocket = websocket }
    if let auth = value("--auth-url") { endpoints.auth = auth }
    return endpoints
}

do {
    let endpoints = try endpoints(CommandLine.arguments)
    let alice = try Person(name: "alice", endpoints: endpoints)
    let bob = try Person(name: "bob", endpoints: endpoints)
    await alice.start()
    await bob.start()
    _ = try await alice.whisperId(within: .seconds(30))
    let bobId = try await bob.whisperId(within: .seconds(30))
    // A new identity is in the key directory from its next epoch; the lookup waits for it.
    _ = try await alice.write("Hello Bob, from an app on the Whisper SDK.", to: bobId)
    _ = try await waitFor(.seconds(60), "Bob's receipt") { await alice.screen.receipts > 0 ? true : nil }
    let alerts = await alice.screen.alerts.count + bob.screen.alerts.count
    print("done: 1 message delivered and acknowledged, \(alerts) key directory alert(s)")
    await alice.session.signOut()
    await bob.session.signOut()
    exit(alerts == 0 ? 0 : 1)
} catch {
    print("whisper-example: \(error)")
    exit(1)
}
