import Foundation
@testable import GatewayService
import GCWorkerService
import PostgresNIO
import Testing
import WhisperClient
import WhisperShared

/// Push-to-talk channels and the floor (docs/protocol.md section 14), on two gateways
/// with real Redis and Postgres; what each member is told is read off its socket.
@Suite struct PushToTalkTests {
    @Test func aChannelIsCreatedJoinedByCodeOrIDLeftAndDeleted() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), carol = try await stack.user(on: 0), dave = try await stack.user(on: 1)
            let hikers = try await alice.connection.createChannel(name: "Hikers")
            #expect(Format.isUUID(hikers.channelId) && PTTJoinCode.isValid(hikers.joinCode))
            #expect(hikers.members == [alice.whisperId] && hikers.ownerId == alice.whisperId)

            // By code (as read out over a radio, in any case); the others are told. A private
            // channel's ID lets nobody in (a public one's does: PushToTalkAccessTests).
            let joined = try await bob.connection.joinChannel(code: hikers.joinCode.lowercased())
            #expect(joined.channelId == hikers.channelId && joined.members == [alice.whisperId, bob.whisperId])
            await expectRefused(.notFound, "a private channel's ID") { _ = try await carol.connection.joinChannel(id: hikers.channelId) }
            _ = try await carol.connection.joinChannel(code: hikers.joinCode)
            try await waitUntil { await Self.memberships(alice).contains(PTTMembership(channelId: hikers.channelId, whisperId: carol.whisperId, change: .joined)) }
            try await waitUntil { await Self.memberships(bob).contains(PTTMembership(channelId: hikers.channelId, whisperId: carol.whisperId, change: .joined)) }
            #expect(try await bob.connection.channels().first?.members.count == 3)
            // Joining twice changes nothing.
            #expect(try await bob.connection.joinChannel(id: hikers.channelId).members.count == 3)

            // Codes and IDs that name nothing, and frames that are not well formed.
            await expectRefused(.notFound, "an unknown code") { _ = try await dave.connection.joinChannel(code: "ZZZZZZZZ") }
            await expectRefused(.invalidPayload, "a code with a letter that is never used") { _ = try await dave.connection.joinChannel(code: "OOOOOOOO") }
            await expectRefused(.invalidPayload, "code and ID together") {
                _ = try await dave.connection.request(PTTChannelJoin(sessionToken: dave.token, .init(joinCode: hikers.joinCode, channelId: hikers.channelId)))
            }

            try await bob.connection.leaveChannel(hikers.channelId)
            try await waitUntil { await Self.memberships(carol).contains(PTTMembership(channelId: hikers.channelId, whisperId: bob.whisperId, change: .left)) }
            #expect(try await bob.connection.channels().isEmpty)
            // Only the owner deletes; to anyone else the channel is not theirs to name.
            await expectRefused(.notFound, "a member deletes") { try await carol.connection.deleteChannel(hikers.channelId) }
            try await alice.connection.deleteChannel(hikers.channelId)
            try await waitUntil { await Self.memberships(carol).contains(PTTMembership(channelId: hikers.channelId, whisperId: alice.whisperId, change: .deleted)) }
            #expect(try await carol.connection.channels().isEmpty)
            await expectRefused(.notFound, "joining a deleted channel") { _ = try await dave.connection.joinChannel(code: hikers.joinCode) }
        }
    }

    @Test func membersAreBounded() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.pttMaxMembers = 3 }).running { stack in
            let owner = try await stack.user(on: 0)
            let channel = try await owner.connection.createChannel(name: "Small")
            for _ in 0..<2 { _ = try await stack.user(on: 1).connection.joinChannel(code: channel.joinCode) }
            let fourth = try await stack.user(on: 0)
            await expectRefused(.forbidden, "a fourth member") { _ = try await fourth.connection.joinChannel(code: channel.joinCode) }
            #expect(try await owner.connection.channels().first?.members.count == 3)
        }
    }

    @Test func theFloorIsGrantedRefusedQueuedAndTakenBackWhenItsHolderDisconnects() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), carol = try await stack.user(on: 0), dave = try await stack.user(on: 1)
            let channel = try await alice.connection.createChannel(name: "Team")
            for member in [bob, carol] { _ = try await member.connection.joinChannel(code: channel.joinCode) }
            let floorKeys = try await WhisperConnection.fetchFloorKeys(websocketURL: stack.websocketURL(1))

            // Free: granted, with a grant the floor key signs; everyone learns who talks.
            let granted = try await alice.connection.requestTalk(channel.channelId)
            #expect(granted.outcome == .granted && granted.holder == alice.whisperId)
            #expect(granted.isValidGrant(floorKeys: floorKeys, at: Clock.millisecondsNow()))
            try await waitUntil { await Self.holders(bob).last == alice.whisperId }
            try await waitUntil { await Self.holders(carol).last == alice.whisperId }
            // A grant for someone else, or out of its window, does not pass.
            var forged = granted
            forged.holder = bob.whisperId
            #expect(!forged.isValidGrant(floorKeys: floorKeys, at: Clock.millisecondsNow()))
            #expect(!granted.isValidGrant(floorKeys: floorKeys, at: (granted.notAfter ?? 0) + 1))

            // Taken: refused, or queued in order.
            let refused = try await bob.connection.requestTalk(channel.channelId)
            #expect(refused.outcome == .refused && refused.holder == alice.whisperId)
            #expect(try await carol.connection.requestTalk(channel.channelId, queue: true) == PTTFloor(channelId: channel.channelId, outcome: .queued, position: 1))
            #expect(try await bob.connection.requestTalk(channel.channelId, queue: true) == PTTFloor(channelId: channel.channelId, outcome: .queued, position: 2))

            // Released: the first waiting gets it.
            #expect(try await alice.connection.releaseTalk(channel.channelId).outcome == .released)
            try await waitUntil { await Self.holders(alice).last == carol.whisperId }
            let carolsGrant = try #require(await Self.floors(bob).last)
            #expect(carolsGrant.isValidGrant(floorKeys: floorKeys, at: Clock.millisecondsNow()))

            // Carol's socket drops: the floor is taken back, which members are told as such,
            // and goes to Bob, next in line.
            await carol.connection.close()
            try await waitUntil { await Self.holders(alice).last == bob.whisperId }
            #expect(await Self.floors(alice).suffix(2).map(\.outcome) == [.disconnected, .granted])
            // Bob lets go with nobody waiting: the floor is free, and everyone is told.
            _ = try await bob.connection.releaseTalk(channel.channelId)
            try await waitUntil { await Self.floors(alice).last.map { $0.holder == nil && $0.outcome == .released } ?? false }

            // Not a member: refused everything, as if the channel did not exist.
            await expectRefused(.notFound, "a stranger asks for the floor") { _ = try await dave.connection.requestTalk(channel.channelId) }
            await expectRefused(.notFound, "a stranger releases") { _ = try await dave.connection.releaseTalk(channel.channelId) }
            await expectRefused(.notFound, "a stranger leaves") { try await dave.connection.leaveChannel(channel.channelId) }
        }
    }

    /// The floor keys are the gateways' own (`GATEWAY_FLOOR_KEYS`), not derived from any
    /// other secret, and rotate without a gap: while a new key is listed after the one
    /// that signs, grants name the signing key, and a client holding the keys of the next
    /// step (the new one first, the old one still listed) accepts them; one that holds
    /// only the new key does not.
    @Test func theFloorKeysAreTheGatewaysOwnAndRotateWithoutAGap() async throws {
        let old = TestServers.floorKeySeed, new = Array((0..<32).map { UInt8(255 - $0) })
        try await MessagingStack.start(routers: 0, gateway: { $0.floorKeys = FloorKeys(seeds: [old, new]) }).running { stack in
            let listed = try await WhisperConnection.fetchFloorKeys(websocketURL: stack.websocketURL(1))
            #expect(listed.keys.map(\.publicKey) == [old, new].map { Data(Ed25519.KeyPair(seed: $0).publicKey).base64EncodedString() })
            #expect(listed == FloorKeys(seeds: [old, new]).listing)
            let alice = try await stack.user(on: 0)
            let channel = try await alice.connection.createChannel(name: "Rotation")
            let grant = try await alice.connection.requestTalk(channel.channelId)
            #expect(grant.keyId == listed.keys[0].keyId)
            #expect(grant.isValidGrant(floorKeys: listed, at: Clock.millisecondsNow()))
            #expect(grant.isValidGrant(floorKeys: FloorKeys(seeds: [new, old]).listing, at: Clock.millisecondsNow()))
            #expect(!grant.isValidGrant(floorKeys: FloorKeys(seeds: [new]).listing, at: Clock.millisecondsNow()))
            // A grant naming a key that signed nothing of it does not pass either.
            var renamed = grant
            renamed.keyId = listed.keys[1].keyId
            #expect(!renamed.isValidGrant(floorKeys: listed, at: Clock.millisecondsNow()))
        }
    }

    @Test func aGrantRunsOutAfterTheLongestTalk() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.pttMaxTalk = .seconds(1) }).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let channel = try await alice.connection.createChannel(name: "Short")
            _ = try await bob.connection.joinChannel(code: channel.joinCode)
            let granted = try await alice.connection.requestTalk(channel.channelId)
            #expect((granted.notAfter ?? 0) - (granted.notBefore ?? 0) == 1_000)
            try await waitUntil { await Self.floors(bob).contains { $0.outcome == .timeout && $0.holder == nil } }
            // Free again.
            #expect(try await bob.connection.requestTalk(channel.channelId).outcome == .granted)
        }
    }

    @Test func publicChannelsAreFoundNearbyWhileAnnouncedAndNotFromFarAway() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.pttAnnounceTTL = .milliseconds(1_500) }).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let trail = try await alice.connection.createChannel(name: "Trail crew", isPublic: true)
            let family = try await alice.connection.createChannel(name: "Family")
            let here = Geohash.encode(latitude: 47.6097, longitude: -122.3331)
            let nextDoor = try #require(Geohash.withNeighbours(here).first { $0 != here })
            let farAway = Geohash.encode(latitude: 48.8566, longitude: 2.3522)

            try await alice.connection.announceChannel(trail.channelId, in: here)
            await expectRefused(.forbidden, "announcing a private channel") { try await alice.connection.announceChannel(family.channelId, in: here) }
            await expectRefused(.notFound, "announcing another's channel") { try await bob.connection.announceChannel(trail.channelId, in: here) }
            await expectRefused(.invalidPayload, "a finer cell than the coarse one") {
                _ = try await bob.connection.nearbyChannels(in: Geohash.encode(latitude: 47.6097, longitude: -122.3331, precision: 7))
            }
            // Bob is on the other gateway: the announcement reaches it over pub/sub.
            try await waitUntil { try await !bob.connection.nearbyChannels(in: here).isEmpty }
            let found = try await bob.connection.nearbyChannels(in: here)
            #expect(found == [PTTNearbyChannels.Channel(channelId: trail.channelId, name: "Trail crew", joinCode: trail.joinCode, memberCount: 1)])
            #expect(try await bob.connection.nearbyChannels(in: nextDoor).map(\.channelId) == [trail.channelId])
            #expect(try await bob.connection.nearbyChannels(in: farAway).isEmpty)
            // Found over the radio or nearby: joined by its code.
            #expect(try await bob.connection.joinChannel(code: found[0].joinCode).members.count == 2)

            // The owner stops sending heartbeats: it drops out.
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).isEmpty }
            // Stopped by its owner, or deleted: gone on every gateway.
            try await alice.connection.announceChannel(trail.channelId, in: here)
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).count == 1 }
            try await alice.connection.announceChannel(trail.channelId, in: nil)
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).isEmpty }
            try await alice.connection.announceChannel(trail.channelId, in: here)
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).count == 1 }
            try await alice.connection.deleteChannel(trail.channelId)
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).isEmpty }

            // Redis kept nothing of the cell: not in its keyspace, not in its append-only
            // file (every write reaches it at once here: appendfsync always), which a
            // replica's copy and a backup are made of.
            let keys = try await stack.withRedis { try await $0.send("KEYS", "*").array?.compactMap(\.string) ?? [] }
            #expect(!keys.contains { $0.contains(here) })
            let files = FileManager.default.enumerator(at: stack.redisServer.directory, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
            let written = files.filter { $0.path.contains("appendonly") }.compactMap { try? Data(contentsOf: $0) }
            #expect(!written.isEmpty, "no append-only file to look into")
            #expect(!written.contains { String(decoding: $0, as: UTF8.self).contains(here) }, "the cell is in Redis's append-only file")
        }
    }

    /// One identity's public channels take a fair share of a cell: past it the owner is
    /// told (`RATE_LIMITED` with the reason), and the channel is listed nowhere.
    @Test func anOwnerIsToldWhenItsShareOfACellIsTaken() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let here = Geohash.encode(latitude: 47.6097, longitude: -122.3331)
            var channels: [String] = []
            for index in 0...NearbyBoard.maxPerOwnerInCell {
                channels.append(try await alice.connection.createChannel(name: "Crew \(index)", isPublic: true).channelId)
            }
            for channel in channels.dropLast() { try await alice.connection.announceChannel(channel, in: here) }
            await expectRefused(.rateLimited, "a fourth channel of one owner in one cell") {
                try await alice.connection.announceChannel(channels.last!, in: here)
            }
            try await waitUntil { try await bob.connection.nearbyChannels(in: here).count == NearbyBoard.maxPerOwnerInCell }
            #expect(try await !bob.connection.nearbyChannels(in: here).map(\.channelId).contains(channels.last!))
            // Another identity's channel is listed beside them.
            let bobs = try await bob.connection.createChannel(name: "Bob's", isPublic: true)
            try await bob.connection.announceChannel(bobs.channelId, in: here)
            #expect(try await alice.connection.nearbyChannels(in: here).map(\.channelId).contains(bobs.channelId))
        }
    }

    @Test func mediaSignalingReachesMembersOnlySignedAndSealed() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), dave = try await stack.user(on: 0)
            let channel = try await alice.connection.createChannel(name: "Media")
            _ = try await bob.connection.joinChannel(code: channel.joinCode)
            let offer = Array("v=0 an SDP offer".utf8)
            let signal = PTTSignaling.make(.offer, offer, channelId: channel.channelId, from: (alice.whisperId, alice.keys), to: bob.peerKeys, sessionToken: alice.token)
            try await alice.connection.sendOnly(signal)
            let received = try #require(try await bob.events(.pttSignalReceived).first?.payload(as: PTTSignalReceived.self))
            #expect(received.kind == .offer && received.from == alice.whisperId)
            #expect(try PTTSignaling.open(received, by: (bob.whisperId, bob.keys), peer: alice.peerKeys) == offer)
            // The server relays what it checked and nothing more: the SDP is sealed.
            #expect(!String(decoding: ServerFrameCodec.encode(received), as: UTF8.self).contains("SDP offer"))

            // A signature that does not verify, a sender acting for another, a stranger either way.
            var forged = signal
            forged.kind = .answer
            await expectRefused(.authFailed, "a signal changed after signing") { _ = try await alice.connection.request(forged) }
            await expectRefused(.forbidden, "from another identity") {
                _ = try await bob.connection.request(PTTSignaling.make(.offer, offer, channelId: channel.channelId, from: (alice.whisperId, alice.keys), to: bob.peerKeys, sessionToken: bob.token))
            }
            await expectRefused(.notFound, "to a non-member") {
                _ = try await alice.connection.request(PTTSignaling.make(.offer, offer, channelId: channel.channelId, from: (alice.whisperId, alice.keys), to: dave.peerKeys, sessionToken: alice.token))
            }
            await expectRefused(.notFound, "from a non-member") {
                _ = try await dave.connection.request(PTTSignaling.make(.offer, offer, channelId: channel.channelId, from: (dave.whisperId, dave.keys), to: alice.peerKeys, sessionToken: dave.token))
            }
            await expectRefused(.invalidPayload, "an oversized candidate") {
                var big = PTTSignaling.make(.candidate, [], channelId: channel.channelId, from: (alice.whisperId, alice.keys), to: bob.peerKeys, sessionToken: alice.token)
                big.ciphertext = Data(count: Limits.MAX_CALL_SIGNAL_BYTES + 1).base64EncodedString()
                _ = try await alice.connection.request(big)
            }
            // A member without a socket is not reached (nothing is kept for later), and the
            // sender is answered as for one handed over: not at all, so a signal cannot tell
            // whether a member is online. What the socket hears after the signal (Carol's
            // floor, asked for once the signal was handled) comes after any refusal of it.
            let carol = try await stack.user(on: 1)
            _ = try await carol.connection.joinChannel(code: channel.joinCode)
            let refusalsBefore = await alice.events.all(.error).count
            await bob.connection.close()
            try await waitUntil { try await stack.withRedis { try await $0.send("GET", RedisKeys.presence(bob.whisperId)).string == nil } }
            try await alice.connection.sendOnly(PTTSignaling.make(.answer, offer, channelId: channel.channelId, from: (alice.whisperId, alice.keys), to: bob.peerKeys, sessionToken: alice.token))
            _ = try await alice.connection.ping()
            _ = try await carol.connection.requestTalk(channel.channelId)
            try await waitUntil { await Self.holders(alice).last == carol.whisperId }
            #expect(await alice.events.all(.error).count == refusalsBefore, "no refusal for a member who is away")
        }
    }

    @Test func aChannelLapsesWhenNoMemberHasConnectedForItsIdleDays() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let quiet = try await alice.connection.createChannel(name: "Quiet")
            let busy = try await alice.connection.createChannel(name: "Busy")
            _ = try await bob.connection.joinChannel(code: busy.joinCode)
            // Both as if untouched for 40 days; then Bob (a member of Busy only) connects.
            try await stack.withPostgres { postgres in
                try await postgres.query("UPDATE ptt_channels SET last_active_at = now() - interval '40 days'", logger: TestServers.logger)
            }
            let back = try await stack.reconnect(bob, on: 0)
            _ = try await back.connection.channels()
            try await waitUntil {
                try await stack.withPostgres { postgres in
                    var recent = false
                    let rows = try await postgres.query(
                        "SELECT last_active_at > now() - interval '1 day' FROM ptt_channels WHERE channel_id = \(busy.channelId)", logger: TestServers.logger
                    )
                    for try await value in rows.decode(Bool.self) { recent = value }
                    return recent
                }
            }
            let lapsed = try await stack.withPostgres { try await IdleChannels(postgres: $0, idleDays: 30, logger: TestServers.logger).lapse() }
            #expect(lapsed == 1)
            #expect(try await back.connection.channels().map(\.channelId) == [busy.channelId])
            await expectRefused(.notFound, "joining a lapsed channel") { _ = try await back.connection.joinChannel(code: quiet.joinCode) }
        }
    }

    @Test func geohashCells() {
        // The usual example of the geohash system.
        #expect(Geohash.encode(latitude: 57.64911, longitude: 10.40744, precision: 11) == "u4pruydqqvj")
        let cell = Geohash.encode(latitude: 57.64911, longitude: 10.40744)
        #expect(cell == "u4pru" && Geohash.isCell(cell))
        let around = Geohash.withNeighbours(cell)
        #expect(around.count == 9 && around.first { $0 == cell } != nil && Set(around).count == 9)
        #expect(!Geohash.isCell("u4pr") && !Geohash.isCell("u4pra"))
    }

    static func memberships(_ user: TestUser) async -> [PTTMembership] {
        await user.events.all(.pttMembership).compactMap { $0.payload(as: PTTMembership.self) }
    }

    static func floors(_ user: TestUser) async -> [PTTFloor] {
        await user.events.all(.pttFloor).compactMap { $0.payload(as: PTTFloor.self) }
    }

    static func holders(_ user: TestUser) async -> [String?] {
        await floors(user).map(\.holder)
    }
}
