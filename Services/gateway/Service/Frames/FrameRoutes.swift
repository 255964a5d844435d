import WhisperMessaging
import WhisperShared

/// Every client frame type's route, one entry each, by feature. The switch is
/// exhaustive: a frame type added to the protocol does not compile until it has a
/// route here.
extension FrameRoute {
    /// The routes, built once.
    static let table: [ClientFrameType: FrameRoute] = Dictionary(
        uniqueKeysWithValues: ClientFrameType.allCases.map { ($0, route(for: $0)) }
    )

    static func route(for type: ClientFrameType) -> FrameRoute {
        switch type {
        // MARK: Sessions: registration and tokens go to auth (docs/protocol.md sections 4 and 5)
        case .ping:
            .open(Ping.self, .anyone, [.control]) { _, _, served in served.answer(Pong(serverTime: Clock.millisecondsNow())) }
        case .registerBegin:
            .open(RegisterBegin.self, .anyone) { handler, payload, served in try await handler.forwarding.toAuth(payload, served) }
        case .registerProof:
            .open(RegisterProof.self, .anyone) { handler, payload, served in try await handler.forwarding.register(payload, served) }
        case .sessionRefresh:
            .open(SessionRefresh.self, .session, [.control]) { handler, payload, served in
                // The old token stops working: look the next one up afresh.
                served.connection.forgetVerifiedSession()
                try await handler.forwarding.toAuth(payload, served)
            }
        case .logout:
            .open(Logout.self, .session, [.control]) { handler, payload, served in try await handler.forwarding.logout(payload, served) }
        case .accountDelete:
            .acting(AccountDelete.self, [.address(.groupOpsPerAddress)], answersRefusals: true) { handler, payload, whisperId, served in
                try await handler.deletions.serve(payload, whisperId: whisperId, served)
            }
        case .updateTokens:
            .open(UpdateTokens.self, .session, [.control]) { handler, payload, served in try await handler.forwarding.toAuth(payload, served) }
        case .reportUser:
            // Charged to the address like routed frames; auth limits it per identity.
            .acting(ReportUser.self) { handler, payload, _, served in try await handler.forwarding.toAuth(payload, served) }
        case .getTurnCredentials:
            .acting(GetTurnCredentials.self) { handler, payload, _, served in try await handler.forwarding.turnCredentials(payload, served) }

        // MARK: Messages, receipts and the pending queue (sections 3 and 7)
        case .sendMessage:
            .acting(SendMessage.self) { handler, payload, whisperId, served in
                try await handler.sends.serve(payload, whisperId: whisperId, served)
            }
        case .deliveryReceipt:
            .acting(DeliveryReceipt.self) { handler, payload, whisperId, served in
                try await handler.receipts.serve(payload, whisperId: whisperId, on: served.connection, limits: handler.limits)
            }
        case .fetchPending:
            .routed(FetchPending.self, as: .fetchPending, charging: .fetchPerIdentity)

        // MARK: Groups, through the router stream (section 6)
        case .groupCreate:
            .routed(GroupCreate.self, as: .groupCreate, [.address(.groupOpsPerAddress)], charging: .groupOpsPerIdentity)
        case .groupUpdate:
            .routed(GroupUpdate.self, as: .groupUpdate, [.address(.groupOpsPerAddress)], charging: .groupOpsPerIdentity)
        case .groupInvitationsList:
            .routed(GroupInvitationsList.self, as: .groupInvitationsList, [.address(.groupOpsPerAddress)], charging: .groupOpsPerIdentity)
        case .groupSendMessage:
            .routed(GroupSendMessage.self, as: .groupSendMessage, charging: .sendPerSender)

        // MARK: Calls, through the router stream (section 9)
        case .callInitiate:
            .routed(CallInitiate.self, as: .callInitiate, charging: .callsPerIdentity)
        case .callAnswer:
            .routed(CallAnswer.self, as: .callAnswer, charging: .callSignalsPerIdentity)
        case .callIceCandidate:
            .routed(CallIceCandidate.self, as: .callIceCandidate, charging: .callSignalsPerIdentity)
        case .callEnd:
            .routed(CallEnd.self, as: .callEnd, charging: .callSignalsPerIdentity)

        // MARK: Presence and typing (section 8)
        case .typing:
            .acting(Typing.self) { handler, payload, whisperId, _ in try await handler.typing.relay(payload, from: whisperId) }
        case .presenceSubscribe:
            .acting(PresenceSubscribe.self, [.identityBucket(.presenceSubscribePerIdentity)]) { handler, payload, whisperId, served in
                served.answer(try await handler.watching.subscribe(payload.whisperIds, watcher: whisperId, on: served.connection))
            }

        // MARK: Live text: the Whisperer's conversations (section 13)
        case .liveConversationCreate:
            .acting(LiveConversationCreate.self, [Self.liveConversations], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.conversations(served).create(payload, owner: whisperId))
            }
        case .liveConversationRename:
            .acting(LiveConversationRename.self, [Self.liveConversations], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.conversations(served).rename(payload, owner: whisperId))
            }
        case .liveConversationDelete:
            .acting(LiveConversationDelete.self, [Self.liveConversations], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.conversations(served).delete(payload, owner: whisperId, releasing: handler.live))
            }
        case .liveConversationsList:
            .acting(LiveConversationsList.self, [Self.liveConversations], answersRefusals: true) { handler, _, whisperId, served in
                served.answer(try await handler.conversations(served).list(owner: whisperId))
            }

        // MARK: Live text: the Whisperer's side
        case .liveWhisperOffer:
            .acting(LiveWhisperOffer.self, answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.live.whisperOffer(payload, whisperId: whisperId, on: served.connection))
            }
        case .liveAuthorize:
            .acting(LiveAuthorize.self, answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.live.authorize(payload, whisperId: whisperId, on: served.connection))
            }
        case .liveDeauthorize:
            .acting(LiveDeauthorize.self, answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.live.deauthorize(payload, whisperId: whisperId))
            }
        case .livePacket:
            // Also charged to the Whisperer's place (`LiveRelay`); nothing answers it unless it is refused.
            .acting(LivePacket.self, answersRefusals: true) { handler, payload, whisperId, served in
                try await handler.live.packet(payload, whisperId: whisperId, on: served.connection)
            }

        // MARK: Live text: a listener's side, for the socket's listener device
        case .liveListenOffer:
            .open(LiveListenOffer.self, .listenerDevice, [.address(.routedPerAddress), .address(.liveOffersPerAddress)], answersRefusals: true) { handler, payload, served in
                served.answer(try await handler.live.listenOffer(payload, device: served.connection.liveDevice ?? "", on: served.connection))
            }
        case .liveListenRequest:
            .open(LiveListenRequest.self, .listenerDevice, [.address(.routedPerAddress)], answersRefusals: true) { handler, payload, served in
                served.answer(try await handler.live.listenRequest(payload, device: served.connection.liveDevice ?? "", on: served.connection))
            }
        case .liveJoining:
            .open(LiveJoining.self, .listenerDevice, [.address(.routedPerAddress)], answersRefusals: true) { handler, payload, served in
                served.answer(try await handler.live.joining(payload, device: served.connection.liveDevice ?? "", on: served.connection))
            }
        case .liveListenerPacket:
            .open(LiveListenerPacket.self, .listenerDevice, [.address(.routedPerAddress)], answersRefusals: true) { handler, payload, served in
                try await handler.live.listenerPacket(payload, device: served.connection.liveDevice ?? "", on: served.connection)
            }
        case .liveDropping:
            // Either side: whichever place the socket holds, with or without a device.
            .open(LiveDropping.self, .anyone, [.address(.routedPerAddress)], answersRefusals: true) { handler, payload, served in
                served.answer(try await handler.live.dropping(payload, on: served.connection))
            }

        // MARK: Live text: a listener device's profile
        case .liveProfileGet:
            .open(LiveProfileGet.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, _, served in
                served.answer(try await handler.live.profiles.profile(of: served.connection.liveDevice ?? ""))
            }
        case .liveProfileRename:
            .open(LiveProfileRename.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, payload, served in
                served.answer(try await handler.live.profiles.rename(payload, device: served.connection.liveDevice ?? "", asker: served.connection.id))
            }
        case .liveProfileShare:
            .open(LiveProfileShare.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, _, served in
                served.answer(try await handler.live.profiles.share(device: served.connection.liveDevice ?? ""))
            }
        case .liveProfileJoin:
            .open(LiveProfileJoin.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, payload, served in
                // A code is a secret that can be guessed: wrong ones are bounded.
                let device = served.connection.liveDevice ?? ""
                let profile = try await handler.limits.guessing(
                    .liveProfileCodeMissesPerDevice, .liveProfileCodeMissesPerAddress, identity: device, address: served.connection.remoteAddress
                ) { try await handler.live.profiles.join(payload, device: device, asker: served.connection.id) }
                served.answer(profile)
            }
        case .liveProfileLeave:
            .open(LiveProfileLeave.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, _, served in
                served.answer(try await handler.live.profiles.leave(device: served.connection.liveDevice ?? "", asker: served.connection.id))
            }
        case .liveProfileConversationsList:
            .open(LiveProfileConversationsList.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, _, served in
                served.answer(try await handler.live.conversations(ofDevice: served.connection.liveDevice ?? ""))
            }
        case .liveProfileDelete:
            .open(LiveProfileDelete.self, .listenerDevice, Self.liveProfile, answersRefusals: true) { handler, _, served in
                served.answer(try await handler.live.profiles.delete(device: served.connection.liveDevice ?? "", asker: served.connection.id))
            }

        // MARK: Push-to-talk: channels, the floor, nearby, media signaling (section 14)
        case .pttChannelCreate:
            .acting(PTTChannelCreate.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.channels.create(payload, owner: whisperId))
            }
        case .pttChannelJoin:
            .acting(PTTChannelJoin.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                // A join code is a secret that can be guessed: wrong ones are bounded.
                let channel = try await handler.limits.guessing(
                    .pttJoinMissesPerIdentity, .pttJoinMissesPerAddress, identity: whisperId, address: served.connection.remoteAddress
                ) { try await handler.ptt.channels.join(payload, member: whisperId) }
                served.answer(channel)
            }
        case .pttChannelLeave:
            .acting(PTTChannelLeave.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.channels.leave(payload, member: whisperId))
            }
        case .pttChannelDelete:
            .acting(PTTChannelDelete.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.channels.delete(payload, owner: whisperId))
            }
        case .pttChannelRemove:
            .acting(PTTChannelRemove.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.channels.remove(payload, owner: whisperId))
            }
        case .pttChannelRotateCode:
            .acting(PTTChannelRotateCode.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.channels.rotateCode(payload, owner: whisperId))
            }
        case .pttChannelsList:
            .acting(PTTChannelsList.self, [Self.ptt], answersRefusals: true) { handler, _, whisperId, served in
                served.answer(try await handler.ptt.channels.list(member: whisperId))
            }
        case .pttTalkRequest:
            .acting(PTTTalkRequest.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.floor.talk(payload, member: whisperId, on: served.connection))
            }
        case .pttTalkRelease:
            .acting(PTTTalkRelease.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.floor.release(payload, member: whisperId, on: served.connection))
            }
        case .pttAnnounce:
            .acting(PTTAnnounce.self, [Self.ptt], answersRefusals: true) { handler, payload, whisperId, served in
                served.answer(try await handler.ptt.nearby.announce(payload, owner: whisperId))
            }
        case .pttNearby:
            .acting(PTTNearby.self, [Self.ptt], answersRefusals: true) { handler, payload, _, served in
                served.answer(try await handler.ptt.nearby.nearby(payload))
            }
        case .pttSignal:
            .acting(PTTSignal.self, [.identityBucket(.pttSignalsPerIdentity)], answersRefusals: true) { handler, payload, whisperId, _ in
                try await handler.ptt.signal(payload, sender: whisperId)
            }
        }
    }

    /// A frame a router serves, as the stream's entry type `routed` (the same frame type:
    /// `FrameRouteTests` builds the table): added to the router stream
    /// (`RouterStreamDesk`), charged to the identity's bucket of `limit` as it is added.
    private static func routed<P: ClientPayload>(
        _: P.Type, as routed: RouterStream.Routed, _ gates: [Gate] = [], charging limit: Limit
    ) -> FrameRoute {
        assert(routed.rawValue == P.frameType.rawValue, "\(P.frameType.rawValue) routed as \(routed.rawValue)")
        return .acting(P.self, gates) { handler, _, whisperId, served in
            try await handler.routerStream.enqueue(routed, served, whisperId: whisperId, charging: limit)
        }
    }

    /// A Whisperer's conversation changes, per identity.
    private static let liveConversations = Gate.identityBucket(.liveConversationsPerIdentity)
    /// Push-to-talk frames but signals, per identity.
    private static let ptt = Gate.identityBucket(.pttPerIdentity)
    /// A listener device's profile frames: each is a Postgres round trip or two.
    private static let liveProfile: [Gate] = [.address(.routedPerAddress), .address(.liveProfilesPerAddress)]
}
