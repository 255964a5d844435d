import Foundation
import Logging
import WhisperClient
import WhisperProtocol

/// One run's connection as the profile's identity (socket, HTTP, keys, peers' keys): the
/// stored session, refreshed with under a day left, or a new sign-in from the phrase once
/// it expired.
actor Session {
    let profile: Profile
    private(set) var identity: Profile.Identity
    let keys: WhisperKeys
    let api: WhisperAPI
    private(set) var connection: WhisperConnection
    private var peers: [String: PeerKeys] = [:]
    private let logger: Logger

    var whisperId: String { identity.whisperId }
    var me: (whisperId: String, keys: WhisperKeys) { (identity.whisperId, keys) }

    init(profile: Profile, logger: Logger) throws {
        self.profile = profile
        self.logger = logger
        identity = try profile.identity()
        do {
            keys = try WhisperKeys(mnemonic: identity.mnemonic)
        } catch {
            throw CLIFailure.config("the mnemonic in \(profile.directory.path)/identity.json is not a valid BIP39 phrase")
        }
        let held = try profile.keyDirectory()
        let proven = (held.provenKeys ?? [:]).compactMapValues { Data(base64Encoded: $0).map { [UInt8]($0) } }
        let auditors = (identity.auditorKeys ?? []).compactMap { Data(base64Encoded: $0).map { [UInt8]($0) } }
        api = WhisperAPI(
            endpoints: identity.endpoints, directory: DirectoryView(keys: held.keys, head: held.head, provenKeys: proven, auditorKeys: auditors)
        )
        connection = WhisperConnection(url: identity.endpoints.websocket, logger: logger)
    }

    /// Opens the socket only.
    func connect() async throws {
        do {
            try await connection.connect()
        } catch {
            throw CLIFailure.unreachable(identity.endpoints.websocket, error)
        }
    }

    /// Opens the socket and makes sure a session is in hand: the stored one, refreshed
    /// when less than a day is left, or a new one from the phrase when it has expired.
    func open() async throws {
        try await connect()
        guard let token = identity.sessionToken, let expiresAt = identity.sessionExpiresAt,
              expiresAt - Clock.millisecondsNow() > 60_000 else {
            try await signIn()
            return
        }
        await connection.resume(whisperId: identity.whisperId, sessionToken: token)
        if expiresAt - Clock.millisecondsNow() < 24 * 3_600_000 {
            let refreshed = try await withSession { connection, _ in try await connection.refreshSession() }
            identity.sessionToken = refreshed.sessionToken
            identity.sessionExpiresAt = refreshed.sessionExpiresAt
            try profile.save(identity)
        }
    }

    /// The SDK's session object for this profile's session (after `open`), for `listen`:
    /// it keeps the connection by itself, and never takes the identity back from another
    /// device (the person decides, with `whisper signin`).
    func keepConnected() -> WhisperSession {
        var configuration = WhisperSession.Configuration(
            gateways: [identity.endpoints.websocket], deviceId: identity.deviceId, platform: identity.platform ?? .android
        )
        configuration.backoff = .init(initial: .milliseconds(250), maximum: .seconds(30))
        configuration.registerAgain = false
        let credentials = identity.sessionToken.flatMap { token in
            identity.sessionExpiresAt.map { SessionCredentials(whisperId: identity.whisperId, sessionToken: token, expiresAt: $0) }
        }
        return WhisperSession(configuration: configuration, keys: keys, credentials: credentials, api: api, logger: logger)
    }

    /// How a run on the session object ended (`untilSignedOut`).
    enum KeptRunEnd<T: Sendable>: Sendable {
        /// The run's own work returned.
        case consumed(T)
        /// The session was signed out (another device, a ban, a deletion), with the reason.
        case signedOut(String)
        /// The session object stopped.
        case stopped
    }

    /// Runs `consume` (a command's work on the session object's events) until it returns,
    /// or until the session is signed out; `connected` is called at each sign-in (`listen`,
    /// `ptt watch`). The session object is stopped after.
    static func untilSignedOut<T: Sendable>(
        _ live: WhisperSession, connected: @escaping @Sendable () async -> Void, _ consume: @escaping @Sendable () async -> T
    ) async -> KeptRunEnd<T> {
        await live.start()
        let end = await withTaskGroup(of: KeptRunEnd<T>.self) { group in
            group.addTask {
                for await state in live.states {
                    switch state {
                    case .connected: await connected()
                    case .signedOut(let reason): return .signedOut(reason.rawValue)
                    default: continue
                    }
                }
                return .stopped
            }
            group.addTask { .consumed(await consume()) }
            let first = await group.next() ?? .stopped
            group.cancelAll()
            return first
        }
        await live.stop()
        return end
    }

    /// Keeps credentials the session object got (a refresh) in the profile.
    func adopt(_ credentials: SessionCredentials) throws {
        identity.sessionToken = credentials.sessionToken
        identity.sessionExpiresAt = credentials.expiresAt
        try profile.save(identity)
    }

    func close() async { await connection.close() }

    /// Registers from the phrase (the server recovers the identity by its signing key)
    /// and stores the session.
    func signIn() async throws {
        let ack = try await connection.register(keys: keys, deviceId: identity.deviceId, platform: identity.platform ?? .android, whisperId: identity.whisperId)
        identity.sessionToken = ack.sessionToken
        identity.sessionExpiresAt = ack.sessionExpiresAt
        try profile.save(identity)
    }

    /// The current session token (after `open`).
    func token() throws -> String {
        guard let token = identity.sessionToken else { throw CLIFailure.config("no session; run the command again") }
        return token
    }

    /// Runs `body` with the socket and the session token. A session the server no longer
    /// knows (another device signed in with the phrase, logged out, lost) is not taken
    /// back silently: that would sign the other device out. The person decides, with
    /// `whisper signin`.
    func withSession<T: Sendable>(_ body: @Sendable (WhisperConnection, String) async throws -> T) async throws -> T {
        do {
            return try await body(connection, try token())
        } catch WhisperClientError.refused(.notRegistered, _), WhisperAPIError.refused(401, _, _) {
            throw CLIFailure.notAllowed(
                "this profile's session has ended (another device signed in with the phrase, or it was logged out); `whisper signin` takes the identity back to this device"
            )
        }
    }

    /// A peer's keys, looked up once per run.
    func peer(_ whisperId: String) async throws -> PeerKeys {
        if let known = peers[whisperId] { return known }
        if whisperId == identity.whisperId { return keys.peerKeys(whisperId: whisperId) }
        let lookup = try await lookup(whisperId)
        peers[whisperId] = lookup.keys
        return lookup.keys
    }

    func lookup(_ whisperId: String) async throws -> KeyLookup {
        let api = self.api
        let lookup: KeyLookup
        do {
            lookup = try await withSession { _, token in try await api.keys(of: whisperId, sessionToken: token) }
        } catch WhisperAPIError.refused(404, _, _) {
            let provenBefore = await api.directory.provenKeys[whisperId] != nil
            throw Self.notFound(profile.shown(whisperId), provenBefore: provenBefore)
        }
        try await keepDirectory()
        return lookup
    }

    /// A lookup's 404, in words. The server answers a deleted identity as it answers an
    /// ID it never had (docs/key-transparency.md, "Commitments"); only
    /// this profile knows whether the directory proved the ID's keys to it before.
    static func notFound(_ shown: String, provenBefore: Bool) -> CLIFailure {
        if provenBefore {
            return .noSuchIdentity(
                "\(shown) is no longer on this server: the key directory proved its keys to you before and now finds nothing, so its account was deleted (a deleted ID never takes keys again)"
            )
        }
        return .noSuchIdentity(
            "no identity \(shown) on this server: the ID is well formed (its checksum holds) but was never registered here, or its account was deleted; the server does not say which"
        )
    }

    /// Checks this identity's own entry in the key directory (`whisper monitor`).
    func checkOwnEntry() async throws -> DirectoryHead {
        let api = self.api, keys = self.keys, whisperId = identity.whisperId
        let head = try await withSession { _, token in try await api.checkOwnEntry(whisperId: whisperId, keys: keys, sessionToken: token) }
        try await keepDirectory()
        return head
    }

    /// Saves the directory's keys and the newest head checked in the profile.
    private func keepDirectory() async throws {
        try profile.save(keyDirectory: Profile.KeyDirectory(
            keys: await api.directory.keys, head: await api.directory.head, provenKeys: await api.directory.provenKeys.mapValues { Data($0).base64EncodedString() }
        ))
    }
}

/// A Whisper ID as a person typed it: normalised, checksum checked before any lookup.
func parseWhisperID(_ typed: String) throws -> String {
    guard let id = WhisperID.normalize(typed) else {
        throw CLIFailure.badInput("`\(typed)` is not a Whisper ID (WSP-XXXX-XXXX-XXXX with a valid checksum); check for a typo")
    }
    return id
}
