/// Every rate limit of the server, each written once. docs/configuration.md's table
/// "Rate limits" lists the same entries (variable, default, scope), which
/// `scripts/check-docs` checks against this file: keep one entry per line group in the
/// shape `Limit("<key>", "<default>", per: .<scope>, ...)`.
extension Limit {
    // MARK: gateway: frames of one socket and one address, in memory

    /// `ping`, `session_refresh`, `logout`, `update_tokens` per socket; the frame counts as refused.
    public static let controlPerSocket = Limit("gateway.rate.limit.control.per.socket", "30/60s", per: .socket, bucket: "control", counts: "control frames (ping, session_refresh, logout, update_tokens)")
    /// The same frames per client address, this instance's count.
    public static let controlPerAddress = Limit("gateway.rate.limit.control.per.address", "600/60s", per: .address, bucket: "control", counts: "control frames from this address")
    /// Refused frames per socket; past it the socket is closed with 4003.
    public static let refusalsPerSocket = Limit("gateway.rate.limit.refusals.per.socket", "20/60s", per: .socket, bucket: "refusals", counts: "refused frames")
    /// Refused frames per client address, this instance's count; past it 4003.
    public static let refusalsPerAddress = Limit("gateway.rate.limit.refusals.per.address", "200/60s", per: .address, bucket: "refusals", counts: "refused frames from this address")
    /// Frames for the routers and the gateway's own stores per client address, this instance's count.
    public static let routedPerAddress = Limit("gateway.rate.limit.routed.per.address", "12000/60s", per: .address, bucket: "routed", counts: "frames from this address")
    /// `group_create` and `group_update` per client address, this instance's count.
    public static let groupOpsPerAddress = Limit("gateway.rate.limit.group.per.address", "120/60s", per: .address, bucket: "group", counts: "group changes from this address")
    /// `account_delete` (the frame and `POST /account/delete`) per client address, every
    /// gateway together (Redis): an address cannot churn registrations and deletions.
    public static let deletionsPerAddress = Limit("gateway.rate.limit.account.delete.per.address", "20/1h", per: .address, bucket: "account_delete", counts: "account deletions from this address")

    // MARK: gateway: frames of one identity, all gateways together (Redis)

    /// `send_message` and each `group_send_message` copy per sender.
    public static let sendPerSender = Limit("gateway.rate.limit.send.per.sender", "600/60s", per: .identity, bucket: "send", counts: "messages")
    /// `account_delete` attempts per identity, signed or not (one deletes it; a few more
    /// finish a deletion that failed half-way).
    public static let deletionsPerIdentity = Limit("gateway.rate.limit.account.delete.per.identity", "6/1h", per: .identity, bucket: "account_delete", counts: "account deletion attempts")
    /// `session_refresh`, `logout`, `update_tokens` per identity.
    public static let controlPerIdentity = Limit("gateway.rate.limit.control.per.identity", "60/60s", per: .identity, bucket: "control", counts: "session and token frames")
    /// `delivery_receipt` per identity (through leases).
    public static let receiptsPerIdentity = Limit("gateway.rate.limit.receipts.per.identity", "6000/60s", per: .identity, bucket: "receipt", counts: "receipts")
    /// `fetch_pending` per identity.
    public static let fetchPerIdentity = Limit("gateway.rate.limit.fetch.per.identity", "120/60s", per: .identity, bucket: "fetch", counts: "fetches")
    /// `group_create`, `group_update` and `group_invitations_list` per identity.
    public static let groupOpsPerIdentity = Limit("gateway.rate.limit.group.per.identity", "30/60s", per: .identity, bucket: "group", counts: "group changes")
    /// `presence_subscribe` per identity.
    public static let presenceSubscribePerIdentity = Limit("gateway.rate.limit.presence.subscribe.per.identity", "30/60s", per: .identity, bucket: "presence_subscribe", counts: "presence_subscribe frames")
    /// Presence changes of one identity passed to its watchers; past it a change is not sent.
    public static let presenceEventsPerIdentity = Limit("gateway.rate.limit.presence.events.per.identity", "12/60s", per: .identity, bucket: "presence_events", counts: "presence changes")
    /// `call_initiate` per identity.
    public static let callsPerIdentity = Limit("gateway.rate.limit.call.per.identity", "20/60s", per: .identity, bucket: "call", counts: "calls")
    /// `call_answer`, `call_ice_candidate`, `call_end` together per identity.
    public static let callSignalsPerIdentity = Limit("gateway.rate.limit.call.signal.per.identity", "600/60s", per: .identity, bucket: "signal", counts: "call signals")
    /// Live-text conversation frames (create, rename, delete, list) per identity.
    public static let liveConversationsPerIdentity = Limit("gateway.rate.limit.live.conversations.per.identity", "30/60s", per: .identity, bucket: "live_conversations", counts: "conversation changes")
    /// Push-to-talk channel, floor and nearby frames per identity.
    public static let pttPerIdentity = Limit("gateway.rate.limit.ptt.per.identity", "120/60s", per: .identity, bucket: "ptt", counts: "push-to-talk frames")
    /// `ptt_channel_join` attempts that named no channel one may join, per identity:
    /// checked before each join, charged only when it fails (`NOT_FOUND`).
    public static let pttJoinMissesPerIdentity = Limit("gateway.rate.limit.ptt.join.misses.per.identity", "10/1h", per: .identity, bucket: "ptt_join_miss", counts: "channel joins that named no channel")
    /// The same per client address, this instance's count.
    public static let pttJoinMissesPerAddress = Limit("gateway.rate.limit.ptt.join.misses.per.address", "30/1h", per: .address, bucket: "ptt_join_miss", counts: "channel joins from this address that named no channel")
    /// `ptt_signal` per identity.
    public static let pttSignalsPerIdentity = Limit("gateway.rate.limit.ptt.signal.per.identity", "600/60s", per: .identity, bucket: "ptt_signal", counts: "push-to-talk signals")

    // MARK: gateway: live text

    /// `live_listen_offer` frames of one listener device, all gateways.
    public static let liveOffersPerDevice = Limit("gateway.rate.limit.live.offers.per.device", "30/60s", per: .device, bucket: "live_offer", counts: "listen offers from this device")
    /// `live_listen_offer` frames from one client address, this instance's count.
    public static let liveOffersPerAddress = Limit("gateway.rate.limit.live.offers.per.address", "120/60s", per: .address, bucket: "live_offer", counts: "listen offers from this address")
    /// Content packets from the Whisperer's socket in one conversation.
    public static let livePacketsPerWhisperer = Limit("gateway.rate.limit.live.packets.per.whisperer", "200/5s", per: .socket, bucket: "live_packets", counts: "packets")
    /// New listener devices (`POST /live/devices`, or the listen page for a browser
    /// without one) per client address, this instance's count.
    public static let liveDevicesPerAddress = Limit("gateway.rate.limit.live.devices.per.address", "20/1h", per: .address, bucket: "live_device", counts: "new listener devices from this address")
    /// Frames of one listener's socket in one conversation after its listen offer.
    public static let liveFramesPerListener = Limit("gateway.rate.limit.live.frames.per.listener", "30/10s", per: .socket, bucket: "live_frames", counts: "frames in this conversation")
    /// Listener profile frames (`live_profile_*`) from one client address, this instance's count.
    public static let liveProfilesPerAddress = Limit("gateway.rate.limit.live.profiles.per.address", "60/60s", per: .address, bucket: "live_profile", counts: "profile frames from this address")
    /// `live_profile_join` attempts that named no code waiting, per device: checked
    /// before each join, charged only when it fails (`NOT_FOUND`).
    public static let liveProfileCodeMissesPerDevice = Limit("gateway.rate.limit.live.profile.code.misses.per.device", "10/1h", per: .device, bucket: "live_profile_miss", counts: "profile joins that named no code")
    /// The same per client address, this instance's count.
    public static let liveProfileCodeMissesPerAddress = Limit("gateway.rate.limit.live.profile.code.misses.per.address", "30/1h", per: .address, bucket: "live_profile_miss", counts: "profile joins from this address that named no code")

    // MARK: storing messages (gateways, routers)

    /// New messages per sender→recipient pair, charged by the store script (resends are free).
    public static let sendPerPair = Limit("whisper.rate.limit.send.per.pair", "300/60s", per: .pair, bucket: "from", counts: "messages to this recipient")

    // MARK: auth

    /// `register_begin` and `register_proof` per client address.
    public static let registerPerAddress = Limit("auth.rate.limit.register.per.ip", "30/60s", per: .address, bucket: "register", counts: "registration attempts")
    /// Successful proofs per identity, charged only after the proof verified.
    public static let registerPerIdentity = Limit("auth.rate.limit.register.per.identity", "10/60s", per: .identity, bucket: "register", counts: "sign-ins for this identity")
    /// `update_tokens` per identity.
    public static let updateTokensPerIdentity = Limit("auth.rate.limit.update.tokens.per.identity", "10/60s", per: .identity, bucket: "update_tokens", counts: "token updates")
    /// `update_tokens` per client address.
    public static let updateTokensPerAddress = Limit("auth.rate.limit.update.tokens.per.ip", "60/60s", per: .address, bucket: "update_tokens", counts: "token updates")
    /// `GET /users/{id}/keys` per caller.
    public static let keyLookupPerIdentity = Limit("auth.rate.limit.key.lookup.per.identity", "120/60s", per: .identity, bucket: "key_lookup", counts: "key lookups")
    /// The key directory's public endpoints (`/kt/`) per client address: they need no
    /// session, so the address is all there is to bound them by.
    public static let directoryPerAddress = Limit("auth.rate.limit.directory.per.ip", "3000/60s", per: .address, bucket: "directory", counts: "key directory requests")
    /// Contacts backup reads, writes and deletes together per identity.
    public static let backupPerIdentity = Limit("auth.rate.limit.backup.per.identity", "60/60s", per: .identity, bucket: "backup", counts: "backup requests")
    /// `report_user` per reporting identity.
    public static let reportPerIdentity = Limit("auth.rate.limit.report.per.identity", "20/1h", per: .identity, bucket: "report", counts: "reports")

    // MARK: router

    /// New calls from one caller to one callee.
    public static let callsPerPair = Limit("router.call.rate.limit.per.pair", "5/10m", per: .pair, bucket: "call_to", counts: "calls to this identity")
    /// New calls to one callee from identities that are not its direct peers, all together.
    public static let strangerCallsPerCallee = Limit("router.call.rate.limit.strangers.per.callee", "20/1h", per: .identity, bucket: "stranger_calls", counts: "calls to this identity")

    // MARK: turn-cred, attachment-signer, admin

    /// TURN credentials per identity, WebSocket and HTTP together.
    public static let turnPerIdentity = Limit("turn.cred.rate.limit.per.identity", "30/60s", per: .identity, bucket: "turn", counts: "TURN credential requests")
    /// Upload URLs per identity.
    public static let presignPerIdentity = Limit("attachment.signer.rate.limit.presign.per.identity", "60/60s", per: .identity, bucket: "presign", counts: "presign requests")
    /// Download URLs per identity.
    public static let downloadPerIdentity = Limit("attachment.signer.rate.limit.download.per.identity", "600/60s", per: .identity, bucket: "download", counts: "download requests")
    /// Failed console sign-ins, every client together.
    public static let consoleSignInFailures = Limit("admin.rate.limit.console.sign.in.failures", "60/60s", per: .server, bucket: "console_sign_in_failures", counts: "failed sign-ins")

    /// Every limit, in the order of docs/configuration.md's table.
    public static let registry: [Limit] = [
        controlPerSocket, controlPerAddress, refusalsPerSocket, refusalsPerAddress, routedPerAddress, groupOpsPerAddress, deletionsPerAddress,
        sendPerSender, deletionsPerIdentity, controlPerIdentity, receiptsPerIdentity, fetchPerIdentity, groupOpsPerIdentity,
        presenceSubscribePerIdentity, presenceEventsPerIdentity, callsPerIdentity, callSignalsPerIdentity,
        liveConversationsPerIdentity, pttPerIdentity, pttJoinMissesPerIdentity, pttJoinMissesPerAddress, pttSignalsPerIdentity,
        liveOffersPerDevice, liveOffersPerAddress, livePacketsPerWhisperer, liveDevicesPerAddress, liveFramesPerListener,
        liveProfilesPerAddress, liveProfileCodeMissesPerDevice, liveProfileCodeMissesPerAddress,
        sendPerPair,
        registerPerAddress, registerPerIdentity, updateTokensPerIdentity, updateTokensPerAddress, keyLookupPerIdentity, directoryPerAddress,
        backupPerIdentity, reportPerIdentity,
        callsPerPair, strangerCallsPerCallee,
        turnPerIdentity, presignPerIdentity, downloadPerIdentity, consoleSignInFailures,
    ]
}
