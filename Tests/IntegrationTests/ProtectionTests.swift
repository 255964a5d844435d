import AsyncHTTPClient
import Foundation
import GatewayService
import NIOCore
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// What the router and the gateway protect on their own: messageIds, bans, sizes,
/// limits, the consumer group, sessions across sockets, receipts in flight.
@Suite struct ProtectionTests {
    @Test func aMessageIdTakenByAnotherSenderIsRefused() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 0)
            let original = alice.message("first", to: bob)
            try await alice.connection.send(original)
            let copycat = carol.message("mine now", to: bob, messageId: original.messageId)
            await expectRefused(.invalidPayload) { try await carol.connection.send(copycat) }
            // Bob has Alice's message and nothing of Carol's.
            let page = try await bob.connection.fetchPending()
            #expect(page.messages.map(\.from) == [alice.whisperId])
        }
    }

    @Test func bannedSendersAndRecipientsAreRefusedOnceTheIdentityCacheRefreshes() async throws {
        try await MessagingStack.start { $0.identityCacheTTL = .milliseconds(200) }.running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 1)
            // Both identities are in the routers' caches now.
            try await alice.connection.send(alice.message("before the ban", to: bob))
            try await carol.connection.send(carol.message("before the ban", to: alice))
            _ = try await IdentityTests.Stack(database: stack.database, auth: stack.auth, gateways: [])
                .query("INSERT INTO bans (whisper_id, reason, banned_by) VALUES ('\(alice.whisperId)', 'spam', 'test')")
            // Each router's cache refreshes by itself within its TTL: sends are refused once
            // it has (as sender: USER_BANNED; as recipient: FORBIDDEN), by every router.
            func refusedFromNowOn(_ send: () async throws -> Void, _ code: ErrorCode) async throws {
                var inARow = 0
                try await waitUntil {
                    do {
                        try await send()
                        inARow = 0
                    } catch WhisperClientError.refused(let actual, _) where actual == code {
                        inARow += 1
                    }
                    return inARow >= 4
                }
            }
            try await refusedFromNowOn({ try await alice.connection.send(alice.message("after the ban", to: bob)) }, .userBanned)
            try await refusedFromNowOn({ try await carol.connection.send(carol.message("to a banned user", to: alice)) }, .forbidden)
            // A ban that has expired is no ban.
            _ = try await IdentityTests.Stack(database: stack.database, auth: stack.auth, gateways: [])
                .query("UPDATE bans SET expires_at = now() - interval '1 second' WHERE whisper_id = '\(alice.whisperId)'")
            try await waitUntil {
                (try? await alice.connection.send(alice.message("ban over", to: bob))) != nil
            }
        }
    }

    @Test func attachmentsAreHeldToTheLimitOfTheirType() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            // Each pointer names an upload of alice's of that size (as attachment-signer records it).
            func message(_ type: MessageType, size: Int64?) async throws -> SendMessage {
                var message = alice.message("pointer", to: bob)
                message.msgType = type
                if let size {
                    let objectKey = "att/2026/11/\(UUID().uuidString.lowercased()).bin"
                    try await stack.withPostgres { postgres in
                        try await postgres.query("""
                            INSERT INTO attachments (object_key, uploader_id, content_type, size_bytes, purpose, expires_at)
                            VALUES (\(objectKey), \(alice.whisperId), 'application/octet-stream', \(size), 'message_attachment', now() + interval '1 day')
                            """)
                    }
                    message.attachment = AttachmentPointer(
                        objectKey: objectKey, contentType: "application/octet-stream",
                        ciphertextSize: size, fileNonce: Data(count: 24).base64EncodedString(),
                        fileKeyBox: FileKeyBox(nonce: Data(count: 24).base64EncodedString(), ciphertext: Data(count: 48).base64EncodedString())
                    )
                }
                return message
            }
            let limits: [(MessageType, Int64)] = [
                (.image, Int64(Limits.MAX_IMAGE_BYTES)), (.voice, Int64(Limits.MAX_VOICE_BYTES)), (.file, Int64(Limits.MAX_FILE_BYTES)),
            ]
            for (type, limit) in limits {
                try await alice.connection.send(try await message(type, size: limit))
                if limit < Int64(Limits.MAX_FILE_BYTES) {
                    let over = try await message(type, size: limit + 1)
                    await expectRefused(.invalidPayload, "\(type) one byte over") { try await alice.connection.send(over) }
                }
                let bare = try await message(type, size: nil)
                await expectRefused(.invalidPayload, "\(type) without an attachment") { try await alice.connection.send(bare) }
            }
            // The schema bound is the largest limit.
            var huge = try await message(.file, size: 1)
            huge.attachment?.ciphertextSize = Int64(Limits.MAX_FILE_BYTES) + 1
            await expectRefused(.invalidPayload, "file over 50 MB") { try await alice.connection.send(huge) }
            // Someone else's upload, or one's own with another size, is not attached.
            let borrowed = try await message(.image, size: 1_000)
            var stolen = bob.message("pointer", to: alice)
            stolen.msgType = .image
            stolen.attachment = borrowed.attachment
            await expectRefused(.forbidden, "another's upload") { try await bob.connection.send(stolen) }
            var resized = try await message(.image, size: 1_000)
            resized.attachment?.ciphertextSize = 999
            await expectRefused(.invalidPayload, "another size") { try await alice.connection.send(resized) }
            #expect(try await stack.pendingDepth(bob.whisperId) == limits.count)
        }
    }

    @Test func presenceIsSetWithAnExpiryAndRefreshedWhileTheSocketLives() async throws {
        try await MessagingStack.start(gateway: { $0.presenceRefreshInterval = .milliseconds(200) }).running { stack in
            let alice = try await stack.user(on: 0)
            try await stack.withRedis { redis in
                let key = RedisKeys.presence(alice.whisperId)
                let ttl = try await redis.send("PTTL", key).int ?? -2
                #expect(ttl > 0 && ttl <= Int64(PresenceStore.ttl.milliseconds), "presence expires by itself: \(ttl)")
                // Nearly expired: the gateway's refresh puts the full expiry back.
                try await redis.send("PEXPIRE", key, 3_000)
                try await waitUntil { (try await redis.send("PTTL", key).int ?? 0) > 10_000 }
                // A closed socket's presence is gone at once, not at expiry.
                await alice.connection.close()
                try await waitUntil { try await redis.send("EXISTS", key).int == 0 }
            }
        }
    }

    @Test func fetchesAreLimitedPerIdentity() async throws {
        try await MessagingStack.start(routers: 1, gateway: { $0.limits[.fetchPerIdentity] = RateLimitRule(capacity: 3, period: .seconds(60)) }).running { stack in
            let alice = try await stack.user(on: 0)
            for _ in 0..<3 { _ = try await alice.connection.fetchPending() }
            await expectRefused(.rateLimited) { _ = try await alice.connection.fetchPending() }
            let bob = try await stack.user(on: 1)
            _ = try await bob.connection.fetchPending()
        }
    }

    @Test func tokenUpdatesAndKeyLookupsAreLimitedPerIdentity() async throws {
        try await MessagingStack.start(auth: {
            $0.limits[.updateTokensPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(60))
            $0.limits[.keyLookupPerIdentity] = RateLimitRule(capacity: 2, period: .seconds(60))
        }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            for index in 0..<2 { try await alice.connection.updateTokens(pushToken: .set("token-\(index)")) }
            await expectRefused(.rateLimited) { try await alice.connection.updateTokens(pushToken: .set("token-3")) }
            let url = "\(stack.auth.baseURL)/users/\(bob.whisperId)/keys"
            func lookup(as user: TestUser) async throws -> Int {
                var request = HTTPClientRequest(url: url)
                request.headers.add(name: "Authorization", value: "Bearer \(user.token)")
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                _ = try await response.body.collect(upTo: 1 << 16)
                return Int(response.status.code)
            }
            #expect(try await lookup(as: alice) == 200)
            #expect(try await lookup(as: alice) == 200)
            #expect(try await lookup(as: alice) == 429)
            #expect(try await lookup(as: bob) == 200, "the limit is per identity")
        }
    }

    @Test func authsInternalEndpointsWantTheInternalToken() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let body = #"{"context":{"gateway":"g","connId":"c"},"payload":{"protocolVersion":1,"cryptoVersion":1,"deviceId":"\#(UUID().uuidString.lowercased())","platform":"ios"}}"#
            func post(token: String?, port: Int? = nil) async throws -> (Int, String) {
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(port ?? stack.auth.internalPort)" + InternalAPI.framePath(.registerBegin))
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                if let token { request.headers.add(name: InternalAPI.tokenHeader, value: token) }
                request.body = .bytes(ByteBuffer(string: body))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 1 << 16)))
            }
            #expect(try await post(token: nil).0 == 401)
            #expect(try await post(token: "wrong").0 == 401)
            #expect(try await post(token: TestServers.internalToken + "x").0 == 401)
            let (status, answer) = try await post(token: TestServers.internalToken)
            #expect(status == 200)
            #expect(try ServerFrameCodec.decode(Array(answer.utf8)).type == .registerChallenge)
            // The public port (behind the load balancer) does not serve them at all.
            #expect(try await post(token: TestServers.internalToken, port: stack.auth.port).0 == 404)
            #expect(try await HTTP.get("\(stack.auth.baseURL)/health").status == 200)
        }
    }

    /// Rotating the internal token without a failed frame: auth accepts the new token and
    /// the previous one (`WHISPER_INTERNAL_TOKEN_PREVIOUS`) while gateways restart, then
    /// only the new one.
    @Test func theInternalTokenRotatesWithoutRefusingGatewaysThatHaveNotRestartedYet() async throws {
        let rotated = "rotated-internal-token-" + String(repeating: "9", count: 24)
        let body = #"{"context":{"gateway":"g","connId":"c"},"payload":{"protocolVersion":1,"cryptoVersion":1,"deviceId":"\#(UUID().uuidString.lowercased())","platform":"ios"}}"#
        func post(_ token: String, to port: Int) async throws -> Int {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)" + InternalAPI.framePath(.registerBegin))
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: InternalAPI.tokenHeader, value: token)
            request.body = .bytes(ByteBuffer(string: body))
            return Int(try await HTTPClient.shared.execute(request, timeout: .seconds(10)).status.code)
        }
        // During the rotation: both work.
        try await MessagingStack.start(routers: 0, auth: {
            $0.internalToken = rotated
            $0.previousInternalToken = TestServers.internalToken
        }).running { (during) async throws -> Void in
            #expect(try await post(rotated, to: during.auth.internalPort) == 200)
            #expect(try await post(TestServers.internalToken, to: during.auth.internalPort) == 200)
            #expect(try await post("some-other-token-" + String(repeating: "0", count: 24), to: during.auth.internalPort) == 401)
            // The test gateways still present the old token: they keep working.
            _ = try await during.user(on: 0)
        }
        // After it: the old token is refused.
        try await MessagingStack.start(routers: 0, auth: { $0.internalToken = rotated }).running { (after) async throws -> Void in
            #expect(try await post(rotated, to: after.auth.internalPort) == 200)
            #expect(try await post(TestServers.internalToken, to: after.auth.internalPort) == 401)
        }
    }

    @Test func theRoutersRecreateTheirGroupWhenItIsDeleted() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let first = alice.message("before", to: bob)
            try await alice.connection.send(first)
            _ = try await stack.withRedis { try await $0.send("XGROUP", "DESTROY", RouterStream.key, RouterStream.group) }
            let second = alice.message("after", to: bob)
            try await alice.connection.send(second, timeout: .seconds(20))
            let received = try await bob.events(.messageReceived, count: 2)
            #expect(received.compactMap { $0.payload(as: MessageReceived.self)?.messageId } == [first.messageId, second.messageId])
            // Handled entries read again from the start of the stream change nothing.
            _ = try await bob.connection.ping()
            #expect(await bob.events.all(.messageReceived).count == 2)
            #expect(try await stack.pendingDepth(bob.whisperId) == 2)
        }
    }

    @Test func concurrentSignInsOfOneIdentityLeaveOneLiveSession() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let urls = stack.gateways.map { "ws://127.0.0.1:\($0.port)/ws" }
            let keys = alice.keys
            let acks = try await withThrowingTaskGroup(of: RegisterAck.self) { group in
                for index in 0..<4 {
                    group.addTask {
                        let connection = WhisperConnection(url: urls[index % 2], logger: TestServers.logger)
                        try await connection.connect()
                        return try await connection.register(keys: keys, deviceId: UUID().uuidString.lowercased(), platform: .android)
                    }
                }
                var acks: [RegisterAck] = []
                for try await ack in group { acks.append(ack) }
                return acks
            }
            #expect(Set(acks.map(\.whisperId)) == [alice.whisperId])
            let live = try await stack.withRedis { redis in
                var live: [String] = []
                for token in acks.map(\.sessionToken) + [alice.token] where try await SessionStore(redis: redis).lookup(token) != nil {
                    live.append(token)
                }
                return live
            }
            #expect(live.count == 1, "\(live.count) live sessions")
        }
    }

    @Test func aNewerSocketOfTheSessionSupersedesTheOlderOneAndALogoutThereEndsItEverywhere() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let first = try await stack.user(on: 0)
            // The first socket has just been trusted with its token.
            _ = try await first.connection.fetchPending()
            let second = try await stack.reconnect(first, on: 1)
            _ = try await second.connection.fetchPending()
            try await waitUntil { await first.connection.closeCode != nil }
            #expect(await first.connection.closeCode == .some(4002))
            try await second.connection.logout()
            // A third socket with the token, and the second one, are refused at once.
            let third = try await stack.reconnect(first, on: 0)
            await expectRefused(.notRegistered) { _ = try await third.connection.fetchPending() }
        }
    }

    @Test func aLiveReceiptLeavesTheStoreOnceWrittenAndIsNotGivenAgain() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (_, received) = try await alice.sendAndWaitForArrival("hi", to: bob)
            try await bob.connection.acknowledge(received)
            _ = try await alice.events(.messageDelivered)
            try await waitUntil { try await stack.storedReceipts(alice.whisperId) == 0 }
            _ = try await alice.connection.fetchPending()
            #expect(await alice.events.all(.messageDelivered).count == 1)
        }
    }

    @Test func aReceiptForASocketThatJustClosedWaitsForTheNextFetch() async throws {
        try await MessagingStack.start().running { stack in
            let aliceFirst = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (message, received) = try await aliceFirst.sendAndWaitForArrival("hi", to: bob)
            // The router finds Alice's presence, but the socket it names is gone by the
            // time the gateway gets the receipt (as when it closes a moment earlier).
            let gateway = try await stack.withRedis { try await PresenceStore(redis: $0).lookup(aliceFirst.whisperId)?.gateway }
            await aliceFirst.connection.close()
            try await stack.waitUntilOffline(aliceFirst)
            try await stack.withRedis {
                _ = try await PresenceStore(redis: $0).set(aliceFirst.whisperId, to: PresenceRecord(gateway: try #require(gateway), connId: "closed-a-moment-ago"))
            }
            try await bob.connection.acknowledge(received)
            try await waitUntil { try await stack.storedReceipts(aliceFirst.whisperId) == 1 }
            let alice = try await stack.reconnect(aliceFirst, on: 1)
            _ = try await alice.connection.fetchPending()
            let receipt = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(receipt.messageId == message.messageId)
            try await waitUntil { try await stack.storedReceipts(aliceFirst.whisperId) == 0 }
        }
    }
    /// A gateway serves a receipt in three steps (look up, keep for the sender, apply).
    /// One that dies after keeping and before applying leaves the message pending: the
    /// recipient gets it again, acknowledges it again, and then it leaves the queue.
    @Test func aReceiptKeptButNotAppliedLeavesTheMessageToBeAcknowledgedAgain() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (message, received) = try await alice.sendAndWaitForArrival("hi", to: bob)
            // Steps one and two as a gateway runs them, then nothing (the gateway "died").
            try await stack.withRedis { redis in
                let pending = PendingQueue(redis: redis)
                let (check, socket) = try await pending.checkReceipt(
                    recipient: bob.whisperId, messageId: message.messageId, delivered: true, locating: alice.whisperId
                )
                #expect(check == .pass(sender: alice.whisperId))
                #expect(socket != nil, "Alice's socket is found in the same round trip")
                let frame = MessageDelivered(messageId: message.messageId, status: .delivered, timestamp: Clock.millisecondsNow())
                try await OwedFrames(redis: redis).keep(ServerFrameCodec.encode(frame), for: alice.whisperId, handingTo: socket)
            }
            let first = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(first.messageId == message.messageId)
            #expect(try await stack.pendingDepth(bob.whisperId) == 1, "not applied: still pending")

            // Bob fetches, finds the message again and acknowledges it through his gateway.
            let page = try await bob.connection.fetchPending()
            #expect(page.messages.map(\.messageId) == [message.messageId])
            try await bob.connection.acknowledge(received)
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            // Told once more (the receipt came twice, which clients take as a state)...
            let told = try await alice.events(.messageDelivered, count: 2)
            #expect(told.compactMap { $0.payload(as: MessageDelivered.self)?.messageId } == [message.messageId, message.messageId])
            // ...and a repeat now changes nothing and tells nobody.
            try await bob.connection.acknowledge(received)
            _ = try await bob.connection.ping()
            #expect(await alice.events.all(.messageDelivered).count == 2)
        }
    }
}
