import ArgumentParser
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import WhisperClient
import WhisperProtocol

/// `whisper live`: whisper from a terminal (docs/sdk.md, "Live text"); `whisper live
/// listen <link>`: listen from another.
struct LiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "live",
        abstract: "Whisper live text from this terminal, or listen to someone who does.",
        discussion: """
            Every keystroke goes to the listeners as it is typed; return moves the line to \
            past text; backspace revises. Listeners join from the printed link (a browser) \
            or with `whisper live listen <link>`. A listener let in before is let in again \
            at once; a new one asks: Ctrl-Y lets the oldest waiting request in, Ctrl-N \
            refuses it, Ctrl-D ends. When standard input is not a terminal each line is \
            typed a character at a time, then return; `/admit`, `/refuse` and `/quit` lines \
            act as the keys do.
            """,
        subcommands: [Whisp.self, ListenLive.self, ListenerProfile.self, ListenerConversations.self],
        defaultSubcommand: Whisp.self
    )
}

extension LiveCommand {
    struct Whisp: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "whisper", abstract: "Whisper (the default).")

        @OptionGroup var common: Common
        @Option(help: "The conversation to whisper in (default: your newest one, or a new one).") var conversation: String?
        @Option(help: "Create a conversation with this name and whisper in it.") var new: String?
        @Option(help: "Your name as listeners see it.") var name = ProcessInfo.processInfo.environment["USER"] ?? "Whisperer"
        @Flag(help: "Let in every listener who asks.") var admitAll = false

        func run() async throws {
            try await guarded("live") {
                // The stored session, refreshed (or signed in again from the phrase once it
                // expired); from then on the SDK's session object keeps the connection and
                // takes the Whisperer's place again after every reconnect.
                let session = try await common.session()
                await session.close()
                let live = await session.keepConnected()
                await live.start()
                let (new, conversation) = (self.new, self.conversation)
                let chosen = try await live.connected { connection, _ in try await Self.choose(connection, new: new, conversation: conversation) }
                let whisperer = try await live.whisper(in: chosen.conversationId, name: String(name.prefix(64)))
                let pending = PendingRequests()
                let admitAll = self.admitAll
                let events = Task {
                    for await event in live.events {
                        switch event {
                        case .credentials(let credentials):
                            try? await session.adopt(credentials)
                        case .whisperer(_, .request(let id, let who)):
                            if admitAll {
                                try? await whisperer.admit(id)
                                note("\(who) is let in")
                            } else {
                                await pending.add(id, who)
                                note("\(who) asks to listen: Ctrl-Y lets them in, Ctrl-N refuses")
                            }
                        case .whisperer(_, .arrived(_, true, let who)):
                            note("\(who ?? "a listener") is back")
                        case .whisperer(_, .joined(_, let who)):
                            note("\(who) is listening")
                        case .whisperer(_, .left(let id, _)):
                            note("\(await pending.name(id) ?? "a listener") left")
                        case .whisperer(_, .deleted):
                            note("the conversation was deleted; nothing more reaches its listeners")
                        default:
                            continue
                        }
                    }
                }
                let states = Task {
                    for await state in live.states {
                        switch state {
                        case .backingOff: note("the connection was lost; reconnecting")
                        case .signedOut(let reason): note(CLIFailure.sessionEnded(reason.rawValue))
                        default: continue
                        }
                    }
                }
                let websocket = await session.identity.endpoints.websocket
                note("whispering in \"\(chosen.name)\"; listeners join at \(Self.link(websocket, chosen.conversationId))")
                let keyboard = Keyboard()
                defer { keyboard.restore() }
                var text = ""
                // A keystroke typed while the socket is away is not lost for good: listeners
                // get the whole text when they join again after the reconnect.
                loop: for await key in keyboard.keys() {
                    switch key {
                    case .text(let typed):
                        text += typed
                        try? await whisperer.type(text)
                    case .backspace:
                        guard !text.isEmpty else { continue }
                        text.unicodeScalars.removeLast()
                        try? await whisperer.type(text)
                    case .enter:
                        try? await whisperer.newline()
                        text = ""
                        if keyboard.isTerminal { FileHandle.standardOutput.write(Data("\r\n".utf8)) }
                        continue loop
                    case .admit:
                        if let (id, who) = await pending.next() {
                            try await whisperer.admit(id, name: who)
                            note("\(who) is let in")
                        }
                    case .refuse:
                        if let (id, who) = await pending.next() {
                            try await whisperer.refuse(id)
                            note("\(who) is refused")
                        }
                    case .quit:
                        break loop
                    }
                    if keyboard.isTerminal { FileHandle.standardOutput.write(Data("\r\u{1b}[K\(text)".utf8)) }
                }
                await live.stopWhispering(in: chosen.conversationId)
                events.cancel()
                states.cancel()
                await live.stop()
            }
        }

        private static func choose(_ connection: WhisperConnection, new: String?, conversation: String?) async throws -> LiveConversation {
            if let new { return try await connection.createLiveConversation(name: String(new.prefix(Limits.MAX_LIVE_CONVERSATION_NAME_CHARS))) }
            let mine = try await connection.liveConversations()
            if let conversation {
                guard let found = mine.first(where: { $0.conversationId == conversation.lowercased() }) else {
                    throw CLIFailure.badInput("no conversation \(conversation) of yours; `whisper live --new NAME` makes one")
                }
                return found
            }
            if let newest = mine.first { return newest }
            return try await connection.createLiveConversation(name: "Live")
        }

        /// The page listeners open: the gateway's origin, `/listen/<id>`.
        static func link(_ websocket: String, _ conversationId: String) -> String {
            "\(ListenerDevice.origin(ofWebSocket: websocket))/listen/\(conversationId)"
        }
    }

    struct ListenLive: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "listen", abstract: "Listen to a live conversation from its link (http(s)://host/listen/<id>)."
        )

        @OptionGroup var common: Common
        @Argument(help: "The link the Whisperer shared.") var link: String
        @Option(help: "Your name as the Whisperer sees it.") var name = ProcessInfo.processInfo.environment["USER"] ?? "Listener"
        @Flag(help: "One JSON object per change instead of the text.") var json = false

        func run() async throws {
            try await guarded("live listen") {
                guard let (websocket, conversationId) = Self.parse(link) else {
                    throw CLIFailure.badInput("not a listen link: \(link) (expected http(s)://host/listen/<conversation ID>)")
                }
                let device = try await Self.device(for: websocket, in: common.profile.directory)
                // A session of the SDK's that only listens: it keeps the socket up by itself
                // (backoff, drains, pings) and asks to listen again after every reconnect.
                let session = WhisperSession(listeningWith: .listening(gateways: [websocket], device: device), logger: common.logger)
                await session.start()
                let states = Task {
                    var wasConnected = false
                    for await state in session.states {
                        switch state {
                        case .connected: wasConnected = true
                        case .backingOff where wasConnected:
                            wasConnected = false
                            note("the connection was lost; reconnecting")
                        default: continue
                        }
                    }
                }
                defer { states.cancel() }
                do {
                    _ = try await session.listen(to: conversationId, name: String(name.prefix(64)))
                } catch {
                    await session.stop()
                    throw CLIFailure.unreachable(websocket, error)
                }
                note("waiting for the Whisperer to let you in")
                var shownPast = 0
                for await event in session.events {
                    guard case .listener(_, let event) = event else { continue }
                    switch event {
                    case .offered(let conversationName, let whispererName):
                        note("asking \(whispererName) to let you in to \"\(conversationName)\"")
                    case .admitted:
                        note("listening")
                        emit(["event": "admitted"])
                    case .refused:
                        emit(["event": "refused"])
                        await session.stop()
                        throw CLIFailure.notAllowed("the Whisperer did not let you in")
                    case .removed:
                        emit(["event": "removed"])
                        await session.stop()
                        throw CLIFailure.notAllowed("the Whisperer let you go")
                    case .whispererLeft(.deleted):
                        emit(["event": "deleted"])
                        await session.stop()
                        throw CLIFailure.refused("NOT_FOUND: the conversation was deleted")
                    case .whispererLeft:
                        note("the Whisperer left; waiting for them to come back")
                        emit(["event": "whisperer_left"])
                    case .text(let transcript):
                        if json {
                            emit(["event": "text", "past": transcript.past, "live": transcript.live])
                        } else {
                            var out = "\r\u{1b}[K"
                            if transcript.past.count < shownPast { shownPast = 0 }
                            for line in transcript.past.dropFirst(shownPast) { out += line + "\n" }
                            shownPast = transcript.past.count
                            FileHandle.standardOutput.write(Data((out + transcript.live).utf8))
                        }
                    }
                }
                throw CLIFailure.unavailable("the session ended")
            }
        }

        private func emit(_ object: [String: Any]) {
            guard json, let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        }

        static func parse(_ link: String) -> (websocket: String, conversationId: String)? {
            guard let url = URL(string: link), let websocket = LiveCommand.websocket(of: url) else { return nil }
            let parts = url.path.split(separator: "/")
            guard parts.count == 2, parts[0] == "listen", Format.isUUID(String(parts[1])) else { return nil }
            return (websocket, String(parts[1]).lowercased())
        }

        /// This profile's listener device for that server, asked for once and kept.
        static func device(for websocket: String, in directory: URL) async throws -> ListenerDevice {
            let safe = websocket.map { $0.isLetter || $0.isNumber ? $0 : "_" }
            let file = directory.appendingPathComponent("listener-\(String(safe)).json")
            if let data = try? Data(contentsOf: file), let kept = try? JSONDecoder().decode(ListenerDevice.self, from: data) { return kept }
            let device: ListenerDevice
            do { device = try await ListenerDevice.issue(websocketURL: websocket) } catch { throw CLIFailure.unavailable("cannot get a listener device: \(error)") }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try JSONEncoder().encode(device).write(to: file)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
            return device
        }
    }
}

extension LiveCommand {
    /// `whisper live profile <server>`: this terminal's listener profile on that server.
    struct ListenerProfile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "profile",
            abstract: "Show or change your listener profile on a server (http(s)://host, or any of its listen links).",
            discussion: """
                Devices that share a profile are one listener: a Whisperer lets them in once \
                and lets them go together. `--share` prints a code another device joins with \
                (`--join CODE`, here or on the listen page) within 10 minutes.
                """
        )

        @OptionGroup var common: Common
        @Argument(help: "The server (http(s)://host) or a listen link.") var server: String
        @Option(help: "Give the profile this name (1 to 64 characters).") var rename: String?
        @Flag(help: "Make a code that lets one more device join this profile.") var share = false
        @Option(help: "Join the profile this code was made for.") var join: String?
        @Flag(help: "Leave the profile for a new one of this device's own.") var leave = false
        @Flag(help: "Delete the profile, its name and the conversations that let it in.") var delete = false

        func run() async throws {
            try await guarded("live profile") {
                let asked = [rename != nil, share, join != nil, leave, delete].filter { $0 }.count
                guard asked <= 1 else { throw CLIFailure.badInput("give one of --rename, --share, --join, --leave, --delete") }
                if let join, !PTTJoinCode.isValid(join.uppercased()) {
                    throw CLIFailure.badInput("not a profile code: \(join) (\(PTTJoinCode.length) characters of \(PTTJoinCode.alphabet))")
                }
                let (rename, share, join, leave, delete) = (self.rename, self.share, self.join, self.leave, self.delete)
                try await LiveCommand.withListenerSocket(server, common) { connection in
                    if share {
                        let code = try await connection.shareLiveProfile()
                        print("code \(code.code) (one device, until \(Date(timeIntervalSince1970: Double(code.expiresAt) / 1_000).formatted(date: .omitted, time: .shortened)))")
                        return
                    }
                    let profile = if let rename {
                        try await connection.renameLiveProfile(String(rename.prefix(64)))
                    } else if let join {
                        try await connection.joinLiveProfile(code: join.uppercased())
                    } else if leave {
                        try await connection.leaveLiveProfile()
                    } else if delete {
                        try await connection.deleteLiveProfile()
                    } else {
                        try await connection.liveProfile()
                    }
                    print("profile \(profile.profileId): \(profile.name ?? "(no name yet)"), \(profile.devices) device\(profile.devices == 1 ? "" : "s")")
                }
            }
        }
    }

    /// `whisper live conversations <server>`: the conversations that let this profile in.
    struct ListenerConversations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "conversations",
            abstract: "List the conversations that let your listener profile in, with their links (to listen again without the Whisperer's link)."
        )

        @OptionGroup var common: Common
        @Argument(help: "The server (http(s)://host) or a listen link.") var server: String

        func run() async throws {
            try await guarded("live conversations") {
                let server = self.server
                try await LiveCommand.withListenerSocket(server, common) { connection in
                    let listed = try await connection.liveProfileConversations()
                    guard !listed.isEmpty else {
                        print("no conversation has let you in yet")
                        return
                    }
                    let websocket = try LiveCommand.websocket(of: server)
                    for entry in listed {
                        let who = entry.whispererName.map { " (\($0))" } ?? ""
                        print("\(entry.name)\(who)\(entry.live ? ", live now" : ""): \(Whisp.link(websocket, entry.conversationId))")
                    }
                }
            }
        }
    }

    /// The WebSocket URL of a server given as http(s)://host or as one of its listen links.
    static func websocket(of server: String) throws -> String {
        if let (websocket, _) = ListenLive.parse(server) { return websocket }
        guard let url = URL(string: server), url.path.isEmpty || url.path == "/", let websocket = websocket(of: url) else {
            throw CLIFailure.badInput("not a server: \(server) (expected http(s)://host or a listen link)")
        }
        return websocket
    }

    /// The gateway's WebSocket URL on the host of an http(s) URL; nil for another scheme.
    static func websocket(of url: URL) -> String? {
        guard let host = url.host, let ws = ["https": "wss", "http": "ws"][url.scheme ?? ""] else { return nil }
        return "\(ws)://\(host)\(url.port.map { ":\($0)" } ?? "")/ws"
    }

    /// Runs `body` on a socket of this profile's listener device for `server`.
    static func withListenerSocket(_ server: String, _ common: Common, _ body: (WhisperConnection) async throws -> Void) async throws {
        let websocket = try websocket(of: server)
        let device = try await ListenLive.device(for: websocket, in: common.profile.directory)
        let connection = WhisperConnection(url: websocket, listenerDevice: device, logger: common.logger)
        do {
            try await connection.connect()
        } catch {
            throw CLIFailure.unreachable(websocket, error)
        }
        do {
            try await body(connection)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }
}

/// Join requests waiting for the Whisperer's answer, oldest first.
private actor PendingRequests {
    private var waiting: [(id: String, name: String)] = []
    private var names: [String: String] = [:]

    func add(_ id: String, _ name: String) {
        names[id] = name
        if !waiting.contains(where: { $0.id == id }) { waiting.append((id, name)) }
    }

    func next() -> (String, String)? {
        guard !waiting.isEmpty else { return nil }
        let first = waiting.removeFirst()
        return (first.id, first.name)
    }

    func name(_ id: String) -> String? { names[id] }
}

private func note(_ text: String) {
    FileHandle.standardError.write(Data("\r\u{1b}[K\(text)\n".utf8))
}

/// Keys from standard input: raw keystrokes from a terminal, or lines typed a
/// character at a time from anything else.
private final class Keyboard: @unchecked Sendable {
    enum Key { case text(String), backspace, enter, admit, refuse, quit }

    let isTerminal = isatty(STDIN_FILENO) == 1
    private var saved = termios()
    private var queued: [Key] = []
    private var bytes: [UInt8] = []

    init() {
        guard isTerminal else { return }
        tcgetattr(STDIN_FILENO, &saved)
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL)
        tcsetattr(STDIN_FILENO, TCSANOW, &raw)
    }

    func restore() {
        if isTerminal { tcsetattr(STDIN_FILENO, TCSANOW, &saved) }
    }

    /// Every key until the end of input, read on a thread of its own (a read waits).
    func keys() -> AsyncStream<Key> {
        AsyncStream { continuation in
            let thread = Thread {
                while let key = self.next() { continuation.yield(key) }
                continuation.finish()
            }
            thread.start()
        }
    }

    /// The next key; nil at the end of input.
    private func next() -> Key? {
        if !queued.isEmpty { return queued.removeFirst() }
        if isTerminal { return nextKeystroke() }
        guard let line = readLine(strippingNewline: true) else { return nil }
        switch line {
        case "/admit": return .admit
        case "/refuse": return .refuse
        case "/quit": return .quit
        default:
            queued = line.unicodeScalars.map { .text(String($0)) } + [.enter]
            return queued.removeFirst()
        }
    }

    private func nextKeystroke() -> Key? {
        while true {
            var byte: UInt8 = 0
            guard read(STDIN_FILENO, &byte, 1) == 1 else { return nil }
            switch byte {
            case 0x04, 0x03: return .quit
            case 0x19: return .admit
            case 0x0e: return .refuse
            case 0x0d, 0x0a: return .enter
            case 0x7f, 0x08: return .backspace
            case 0x1b: continue
            case 0x00..<0x20: continue
            default:
                bytes.append(byte)
                // A whole UTF-8 character, or keep reading its bytes.
                if let text = String(validating: bytes, as: UTF8.self) {
                    bytes = []
                    return .text(text)
                }
                if bytes.count >= 4 { bytes = [] }
            }
        }
    }
}
