import AuthService
import Foundation
import GatewayService
import GCWorkerService
import PostgresNIO
import Testing
import RouterService
import WhisperClient
import WhisperMessaging
import WhisperShared

/// Auth, two gateways and two routers on real Redis and Postgres. Each stack has a
/// redis-server of its own: routers of one stack must not consume another's stream.
struct MessagingStack {
    let database: PostgresSettings
    /// Whether the stack made its database (and releases it when it stops).
    let ownsDatabase: Bool
    let redisServer: RedisProcess
    let redis: RedisConfiguration
    let auth: RunningService
    let gateways: [RunningService]
    let routers: [RunningService]
    /// The key directory's publisher (an epoch every 200 ms while identities wait), so
    /// lookups are proven as deployed.
    let directory: DirectoryPublisherTask

    static func start(
        routers routerCount: Int = 2, router configure: (inout RouterSettings) -> Void = { _ in },
        gateway configureGateway: (inout GatewaySettings) -> Void = { _ in },
        auth configureAuth: (inout AuthSettings) -> Void = { _ in },
        database existing: PostgresSettings? = nil,
        redis otherRedis: RedisConfiguration? = nil,
        streamShards: StreamShards? = nil
    ) async throws -> MessagingStack {
        // A Redis of the stack's own, unless it is given one (a cluster).
        let redisServer = try RedisProcess()
        try redisServer.start()
        var redis = try otherRedis ?? #require(RedisConfiguration(url: redisServer.url))
        if let streamShards { redis.streamShards = streamShards }
        let database: PostgresSettings
        if let existing { database = existing } else { database = try await TestDatabases.shared.make() }
        var authSettings = TestServers.authSettings(database, redis: redis)
        configureAuth(&authSettings)
        let finalAuthSettings = authSettings
        // Whatever started is stopped again when a later step fails.
        var gateways: [RunningService] = [], routers: [RunningService] = []
        var startedAuth: RunningService?
        var startedDirectory: DirectoryPublisherTask?
        _ = try await StartedTogether.start { started in
            let auth = started.add(try await TestServers.startAuth(finalAuthSettings))
            startedAuth = auth
            startedDirectory = started.add(try await TestServers.startDirectoryPublisher(database))
            var gatewaySettings = TestServers.gatewaySettings(database, authPort: auth.internalPort, redis: redis)
            // Gateways store the messages they serve themselves with the routers' rules for
            // storing (a deployment sets both alike: docs/configuration.md).
            var storing = TestServers.routerSettings(database, redis: redis)
            configure(&storing)
            gatewaySettings.limits[.sendPerPair] = storing.limits[.sendPerPair]
            gatewaySettings.pendingCapacity = storing.pendingCapacity
            gatewaySettings.identityCacheTTL = storing.identityCacheTTL
            gatewaySettings.unknownIdentityTTL = storing.unknownIdentityTTL
            configureGateway(&gatewaySettings)
            for _ in 0..<2 {
                // Each gateway an instance of its own, with its own channel, as deployed.
                var own = gatewaySettings
                own.common.instanceID = "gateway-\(UUID().uuidString.prefix(8).lowercased())"
                let settings = own
                let gateway = started.add(try await RunningService.start { running in
                    buildGateway(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
                })
                _ = try await HTTP.waitFor("\(gateway.baseURL)/ready") { $0.status == 200 }
                gateways.append(gateway)
            }
            for _ in 0..<routerCount {
                var settings = TestServers.routerSettings(database, redis: redis)
                configure(&settings)
                let routerSettings = settings
                routers.append(started.add(try await RunningService.start { running in
                    buildRouter(settings: routerSettings, logger: TestServers.logger, onServerRunning: running).assembly
                }))
            }
        }
        let auth = try #require(startedAuth)
        return MessagingStack(
            database: database, ownsDatabase: existing == nil, redisServer: redisServer, redis: redis, auth: auth, gateways: gateways, routers: routers,
            directory: try #require(startedDirectory)
        )
    }

    /// A group of `owner` and `members`, made direct peers first, for messages through the
    /// router stream (`TestUser.copy`); every member has seen its `group_created`.
    func streamGroup(_ owner: TestUser, _ members: [TestUser]) async throws -> String {
        try await makePeers([owner] + members)
        let created = try await owner.connection.createGroup(title: "Through the stream", memberIds: members.map(\.whisperId))
        for member in members { _ = try await member.events(.groupCreated) }
        return created.groupId
    }

    /// Runs `body` with a Redis client of its own on the stack's Redis.
    func withRedis<T: Sendable>(_ body: (RedisClient) async throws -> T) async throws -> T {
        try await TestServers.withRedis(redis, body)
    }

    /// Makes every pair of `users` direct peers (`MessagingStack.makePeers(_:on:)`).
    func makePeers(_ users: [TestUser]) async throws {
        try await withRedis { try await Self.makePeers(users.map(\.whisperId), on: $0) }
    }

    /// Makes every pair of `whisperIds` direct peers, as if each had sent the other a
    /// message (the records each stored message leaves, `RedisKeys.peers` and
    /// `RedisKeys.wrote`): a group's
    /// owner adds only its direct peers, and invites anyone else.
    static func makePeers(_ whisperIds: [String], on redis: RedisClient) async throws {
        let now = Clock.millisecondsNow()
        var commands: [RedisCommand] = []
        for id in whisperIds {
            for other in whisperIds where other != id {
                commands.append(RedisCommand("ZADD", RedisKeys.peers(id), now, other))
                commands.append(RedisCommand("ZADD", RedisKeys.wrote(id), now, other))
            }
        }
        guard !commands.isEmpty else { return }
        _ = try await redis.pipeline(commands)
    }

    /// Runs `body` with a Postgres client of its own on the stack's database.
    func withPostgres<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: TestServers.logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }

    /// A stored message's state (`pending`, `delivered`, `read`), nil once it is gone.
    func messageState(_ messageId: String, for recipient: TestUser) async throws -> String? {
        try await withRedis { try await $0.send("HGET", PendingQueue.messageKey(recipient.whisperId, messageId), "state").string }
    }

    /// Messages waiting in a recipient's pending queue.
    func pendingDepth(_ whisperId: String) async throws -> Int {
        try await withRedis { try await PendingQueue(redis: $0).depth(recipient: whisperId) }
    }

    /// Receipts stored for `whisperId` and not yet taken by a socket of theirs.
    func storedReceipts(_ whisperId: String) async throws -> Int {
        try await withRedis { try await OwedFrames(redis: $0).count(for: whisperId) }
    }

    func storedGroupEvents(_ whisperId: String) async throws -> Int {
        try await withRedis { try await OwedFrames(redis: $0, store: .groupEvents).count(for: whisperId) }
    }

    /// Entries ever added to the router stream, every shard (`entries-added` of `XINFO
    /// STREAM`): handled entries are deleted, so its length says only what waits.
    func routerStreamLength() async throws -> Int {
        try await withRedis { redis in
            var added = 0
            for key in redis.configuration.streamShards.keys(RouterStream.key) {
                guard case .array(let fields) = try await redis.pipeline([RedisCommand("XINFO", "STREAM", key)])[0] else { continue }
                var index = 0
                while index + 1 < fields.count {
                    if fields[index].string == "entries-added" { added += Int(fields[index + 1].int ?? 0) }
                    index += 2
                }
            }
            return added
        }
    }

    /// Entries the router stream holds now (added and not yet handled), every shard.
    func routerStreamBacklog() async throws -> Int {
        try await withRedis { redis in
            try await redis.pipeline(redis.configuration.streamShards.keys(RouterStream.key).map { RedisCommand("XLEN", $0) })
                .reduce(0) { $0 + Int($1.int ?? 0) }
        }
    }

    /// How often Redis ran `command` (lower case, as `INFO commandstats` names it) since
    /// its statistics were last reset; nil when it has not run.
    func commandCalls(_ command: String) async throws -> Int? {
        let stats = try await withRedis { try await $0.send("INFO", "commandstats").string ?? "" }
        let line = stats.split(separator: "\r\n").first { $0.hasPrefix("cmdstat_\(command):") }
        return line.flatMap { $0.split(separator: ",").first?.split(separator: "=").last }.flatMap { Int($0) }
    }

    /// The jobs on the push stream, every shard (oldest first within one), each as its fields.
    func pushJobs() async throws -> [[String: String]] {
        try await withRedis { redis in
            let shards = redis.configuration.streamShards.keys(PushStream.key)
            let entries = try await redis.pipeline(shards.map { RedisCommand("XRANGE", $0, "-", "+") }).flatMap { $0.array ?? [] }
            return entries.map { entry in
                let fields = entry.array?.last?.array?.compactMap(\.string) ?? []
                return Dictionary(stride(from: 0, to: fields.count - 1, by: 2).map { (fields[$0], fields[$0 + 1]) }) { _, last in last }
            }
        }
    }

    /// The `/metrics` pages of `services`, one after the other.
    func metricsText(of services: [RunningService]) async throws -> String {
        var text = ""
        for service in services {
            text += try await HTTP.get("\(service.baseURL)/metrics").body + "\n"
        }
        return text
    }

    /// Router stream entries read by a router and not yet acknowledged.
    func unacknowledgedEntries() async throws -> Int {
        try await withRedis { redis in
            var waiting = 0
            for key in redis.configuration.streamShards.keys(RouterStream.key) {
                guard let count = try await redis.send("XPENDING", key, RouterStream.group).array?.first?.int else { return -1 }
                waiting += Int(count)
            }
            return waiting
        }
    }

    /// The WebSocket URL of gateway `index`.
    func websocketURL(_ index: Int) -> String { "ws://127.0.0.1:\(gateways[index].port)/ws" }

    /// Runs `body` on this stack, then stops it, also when `body` throws (a failing
    /// test leaves no services behind for the tests after it).
    func stop() async throws {
        defer { if ownsDatabase { TestDatabases.shared.release(database) } }
        for router in routers { try await router.stop() }
        for gateway in gateways { try await gateway.stop() }
        try await auth.stop()
        try await directory.stop()
    }

    /// A registered user on gateway `index`.
    func user(on index: Int, platform: Platform = .ios, pushToken: String? = nil, voipToken: String? = nil) async throws -> TestUser {
        let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let connection = WhisperConnection(url: "ws://127.0.0.1:\(gateways[index].port)/ws", logger: TestServers.logger)
        try await connection.connect()
        let ack = try await connection.register(
            keys: keys, deviceId: UUID().uuidString.lowercased(), platform: platform, pushToken: pushToken, voipToken: voipToken
        )
        return TestUser(whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, connection: connection, events: EventLog(connection))
    }

    /// A registered user whose socket is closed again: offline, with a session to come
    /// back with (`reconnect`).
    func offlineUser(on index: Int, platform: Platform = .ios, pushToken: String? = nil) async throws -> TestUser {
        let user = try await user(on: index, platform: platform, pushToken: pushToken)
        await user.connection.close()
        try await waitUntilOffline(user)
        return user
    }

    /// Waits until the gateway has let go of the user's socket (its presence is gone).
    func waitUntilOffline(_ user: TestUser) async throws {
        try await withRedis { redis in
            try await waitUntil { try await PresenceStore(redis: redis).lookup(user.whisperId) == nil }
        }
    }

    /// A new socket for an existing user's session (a reconnect).
    func reconnect(_ user: TestUser, on index: Int) async throws -> TestUser {
        let connection = WhisperConnection(url: "ws://127.0.0.1:\(gateways[index].port)/ws", logger: TestServers.logger)
        try await connection.connect()
        await connection.resume(whisperId: user.whisperId, sessionToken: user.token)
        return TestUser(whisperId: user.whisperId, keys: user.keys, token: user.token, connection: connection, events: EventLog(connection))
    }
}

struct TestUser {
    let whisperId: String
    let keys: WhisperKeys
    let token: String
    let connection: WhisperConnection
    let events: EventLog

    var peerKeys: PeerKeys {
        PeerKeys(whisperId: whisperId, encPublicKey: keys.encPublicKey, signPublicKey: keys.signPublicKey)
    }

    func message(_ text: String, to peer: TestUser, messageId: String = UUID().uuidString.lowercased(), timestamp: Int64 = Clock.millisecondsNow()) -> SendMessage {
        MessageCrypto.makeMessage(Array(text.utf8), from: (whisperId, keys), to: peer.peerKeys, sessionToken: token, messageId: messageId, timestamp: timestamp)
    }

    /// A message to `member` that goes through the router stream: the copy for it of a
    /// group message in `groupId` (`MessagingStack.streamGroup`). Group copies are the
    /// messages routers serve; a 1:1 message is served by its sender's gateway.
    func copy(_ text: String, to member: TestUser, in groupId: String, messageId: String = RandomID.uuid(), timestamp: Int64 = Clock.millisecondsNow()) -> GroupSendMessage {
        MessageCrypto.makeGroupCopies(
            Array(text.utf8), groupId: groupId, from: (whisperId, keys), to: [member.peerKeys], sessionToken: token, messageId: messageId, timestamp: timestamp
        )[0]
    }

    /// Sends one message to `peer` and waits until it arrives there (the first message
    /// `peer` has received); both sides of it.
    func sendAndWaitForArrival(_ text: String, to peer: TestUser) async throws -> (sent: SendMessage, received: MessageReceived) {
        let message = message(text, to: peer)
        try await connection.send(message)
        var arrived: MessageReceived?
        try await waitUntil {
            arrived = await peer.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }
                .first { $0.messageId == message.messageId }
            return arrived != nil
        }
        return (message, try #require(arrived))
    }

    /// Sends `count` messages to `peer`, each accepted before the next; their messageIds.
    func send(_ count: Int, to peer: TestUser, labelled label: String) async throws -> Set<String> {
        var sent: Set<String> = []
        for index in 0..<count {
            let message = message("\(label) \(index)", to: peer)
            try await connection.send(message)
            sent.insert(message.messageId)
        }
        return sent
    }

    /// Waits until at least `count` events of `type` arrived; returns all of them.
    @discardableResult
    func events(_ type: ServerFrameType, count: Int = 1, timeout: Duration = .seconds(5)) async throws -> [ServerFrame] {
        try await events.wait(for: type, count: count, timeout: timeout)
    }
}

/// Every unsolicited frame a test connection received, in order.
actor EventLog {
    private var frames: [ServerFrame] = []
    private var task: Task<Void, Never>?

    init(_ connection: WhisperConnection) {
        let events = connection.events
        task = nil
        Task { await self.start(events) }
    }

    private func start(_ events: AsyncStream<ServerFrame>) {
        task = Task {
            for await event in events { self.append(event) }
        }
    }

    private func append(_ frame: ServerFrame) { frames.append(frame) }

    func all(_ type: ServerFrameType) -> [ServerFrame] { frames.filter { $0.type == type } }

    func wait(for type: ServerFrameType, count: Int, timeout: Duration) async throws -> [ServerFrame] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let found = all(type)
            if found.count >= count { return found }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TestSetupError("\(all(type).count) of \(count) \(type.rawValue) events within \(timeout)")
    }
}

extension TestServers {
    static func routerSettings(_ database: PostgresSettings, redis: RedisConfiguration = TestServers.redis) -> RouterSettings {
        let generous = RateLimitRule("100000/60s")!
        var settings = RouterSettings(common: common(service: "router", postgres: database, redis: redis), claimAfter: .seconds(1))
        settings.limits[.sendPerPair] = generous
        return settings
    }
}
