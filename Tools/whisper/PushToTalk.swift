import ArgumentParser
import Foundation
import WhisperClient
import WhisperProtocol

/// `whisper ptt`: push-to-talk channels and their floor from a terminal (docs/sdk.md).
/// The audio is an app's: this shows who may talk, and takes and gives the floor.
struct PTTCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ptt", abstract: "Push-to-talk channels: create, join, list, find nearby, hold the floor, watch who talks.",
        subcommands: [Create.self, Join.self, Leave.self, Delete.self, List.self, Nearby.self, Announce.self, Hold.self, Watch.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a channel; prints its ID and join code.")
        @OptionGroup var common: Common
        @Argument(help: "Its name (1 to 64 characters).") var name: String
        @Flag(help: "Let it be announced to people nearby.") var isPublic = false

        func run() async throws {
            try await channelCommand(common, "ptt create") { connection in
                let channel = try await connection.createChannel(name: name, isPublic: isPublic)
                print("\(channel.channelId) \(channel.joinCode)")
            }
        }
    }

    struct Join: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Join a channel by its join code or its ID; prints its ID.")
        @OptionGroup var common: Common
        @Argument(help: "The join code (8 characters) or the channel ID.") var codeOrId: String

        func run() async throws {
            try await channelCommand(common, "ptt join") { connection in
                let channel = Format.isUUID(codeOrId)
                    ? try await connection.joinChannel(id: codeOrId.lowercased()) : try await connection.joinChannel(code: codeOrId)
                print(channel.channelId)
            }
        }
    }

    struct Leave: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Leave a channel.")
        @OptionGroup var common: Common
        @Argument var channelId: String

        func run() async throws {
            try await channelCommand(common, "ptt leave") { try await $0.leaveChannel(channelId) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel (its owner only).")
        @OptionGroup var common: Common
        @Argument var channelId: String

        func run() async throws {
            try await channelCommand(common, "ptt delete") { try await $0.deleteChannel(channelId) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The channels you are in: ID, join code, members, name.")
        @OptionGroup var common: Common

        func run() async throws {
            try await channelCommand(common, "ptt list") { connection in
                for channel in try await connection.channels() {
                    print("\(channel.channelId) \(channel.joinCode) \(channel.members.count) \(channel.name)")
                }
            }
        }
    }

    struct Nearby: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Public channels announced near a place: join code, members, name.",
            discussion: "Only the place's 5-character geohash cell (about 5 km) is sent, never the coordinates."
        )
        @OptionGroup var common: Common
        @Option var lat: Double
        @Option var lon: Double

        func run() async throws {
            try await channelCommand(common, "ptt nearby") { connection in
                for channel in try await connection.nearbyChannels(in: try cell(lat, lon)) {
                    print("\(channel.joinCode) \(channel.memberCount) \(channel.name)")
                }
            }
        }
    }

    struct Announce: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Keep a public channel of yours announced near a place (every 10 s) until interrupted or --count announcements."
        )
        @OptionGroup var common: Common
        @Argument var channelId: String
        @Option var lat: Double
        @Option var lon: Double
        @Option(help: "Stop after this many announcements.") var count: Int?

        func run() async throws {
            try await channelCommand(common, "ptt announce") { connection in
                let place = try cell(lat, lon)
                var sent = 0
                while count.map({ sent < $0 }) ?? true {
                    try await connection.announceChannel(channelId, in: place)
                    sent += 1
                    if count.map({ sent < $0 }) ?? true { try await Task.sleep(for: .seconds(10)) }
                }
            }
        }
    }

    struct Hold: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take the floor (waiting in line with --queue) and hold it until return or end of input, then let go.",
            discussion: """
                Prints granted, queued or refused, then released. Exits 75 when refused, or when \
                the floor is taken back while held (the longest talk is over, or this socket was \
                seen to close: prints lost), and 69 when the connection closes (another run of \
                this profile may have taken the session).
                """
        )
        @OptionGroup var common: Common
        @Argument var channelId: String
        @Flag(help: "Wait in line when someone else holds it.") var queue = false

        /// How a hold ends.
        enum End: Sendable {
            case released
            /// The server took the floor back (`timeout`, `disconnected`) or gave it on.
            case lost(PTTFloor)
            case closed
        }

        func run() async throws {
            try await guarded("ptt hold") {
                let session = try await common.session()
                let connection = await session.connection
                let me = await session.whisperId
                var floor = try await connection.requestTalk(channelId, queue: queue)
                say(floor.outcome.rawValue)
                if floor.outcome == .queued {
                    for await frame in connection.events {
                        guard let next = frame.payload(as: PTTFloor.self), next.channelId == channelId else { continue }
                        if next.holder == me {
                            floor = next
                            say("granted")
                            break
                        }
                    }
                }
                guard floor.outcome == .granted else {
                    await session.close()
                    throw CLIFailure.tryLater("\(floor.holder ?? "someone") holds the floor")
                }
                switch await Self.held(channelId, by: me, on: connection) {
                case .released:
                    _ = try await connection.releaseTalk(channelId)
                    say("released")
                    await session.close()
                case .lost(let next):
                    say("lost")
                    await session.close()
                    let why = switch next.outcome {
                    case .timeout: "the longest talk is over"
                    case .disconnected: "the server saw this socket close"
                    default: next.holder.map { "\($0) has it now" } ?? "it was freed"
                    }
                    throw CLIFailure.tryLater("the floor was taken back: \(why)")
                case .closed:
                    say("lost")
                    throw CLIFailure.unavailable("the connection closed, and the floor with it (another run of this profile may have taken the session)")
                }
            }
        }

        /// Holds the floor until a line (return) or the end of input, or until the server
        /// says someone other than `me` holds it, or none does, or the socket closes.
        static func held(_ channelId: String, by me: String, on connection: WhisperConnection) async -> End {
            let (ends, ending) = AsyncStream<End>.makeStream()
            // readLine blocks its thread and cannot be cancelled (a task group would wait
            // for it): when the floor is lost first, the process ends with it still waiting.
            Task.detached {
                _ = readLine()
                ending.yield(.released)
            }
            let floor = Task {
                for await frame in connection.events {
                    guard let floor = frame.payload(as: PTTFloor.self), floor.channelId == channelId, floor.holder != me else { continue }
                    ending.yield(.lost(floor))
                    return
                }
                ending.yield(.closed)
            }
            var first = End.closed
            for await end in ends {
                first = end
                break
            }
            floor.cancel()
            return first
        }
    }

    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print who holds the floor and who joins or leaves, as it happens.",
            discussion: "Keeps its connection as `whisper listen` does: it comes back after a drop, or after another run of this profile used the session."
        )
        @OptionGroup var common: Common
        @Argument var channelId: String
        @Flag(help: "One JSON object per line.") var json = false
        @Option(help: "Exit after this many events.") var count: Int?

        func run() async throws {
            try await guarded("ptt watch") {
                if let count, count < 1 { throw CLIFailure.badInput("--count must be at least 1") }
                let session = try await common.session()
                let channelId = self.channelId
                guard try await session.withSession({ connection, _ in try await connection.channels() }).contains(where: { $0.channelId == channelId }) else {
                    await session.close()
                    throw CLIFailure.badInput("you are not in channel \(channelId)")
                }
                await session.close()
                // The SDK's session object keeps the connection; each socket it signs in on
                // becomes the identity's live one, which members' events are sent to.
                let live = await session.keepConnected()
                let json = self.json, count = self.count
                let end = await Session.untilSignedOut(live, connected: {
                    FileHandle.standardError.write(Data("watching \(channelId)\n".utf8))
                }) {
                    var seen = 0
                    for await event in live.events {
                        guard case .frame(let frame) = event, let line = Self.line(frame, channelId: channelId) else { continue }
                        Self.print(line, json: json)
                        seen += 1
                        if let count, seen >= count { return }
                    }
                }
                if case .signedOut(let reason) = end { throw CLIFailure.notAllowed(CLIFailure.sessionEnded(reason)) }
            }
        }

        /// A floor or membership change of the channel, as the line to print.
        static func line(_ frame: ServerFrame, channelId: String) -> [String: Any]? {
            if let floor = frame.payload(as: PTTFloor.self), floor.channelId == channelId {
                return ["event": "floor", "outcome": floor.outcome.rawValue, "holder": floor.holder ?? NSNull()]
            }
            if let change = frame.payload(as: PTTMembership.self), change.channelId == channelId {
                return ["event": "membership", "change": change.change.rawValue, "whisperId": change.whisperId]
            }
            return nil
        }

        static func print(_ line: [String: Any], json: Bool) {
            if json, let data = try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys]) {
                FileHandle.standardOutput.write(data + Data("\n".utf8))
            } else if line["event"] as? String == "floor" {
                say((line["holder"] as? String).map { "\($0) is talking" } ?? "the floor is free")
            } else {
                say("\(line["whisperId"] ?? "") \(line["change"] ?? "")")
            }
        }
    }
}

/// A line on stdout at once (a watcher reads it as it happens, even through a pipe).
private func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

private func cell(_ lat: Double, _ lon: Double) throws -> String {
    guard (-90...90).contains(lat), (-180...180).contains(lon) else { throw CLIFailure.badInput("--lat is -90 to 90, --lon -180 to 180") }
    return Geohash.encode(latitude: lat, longitude: lon)
}

extension AsyncParsableCommand {
    /// Runs one request with the profile's session, then closes it.
    func channelCommand(_ common: Common, _ what: String, _ body: @Sendable @escaping (WhisperConnection) async throws -> Void) async throws {
        try await guarded(what) {
            let session = try await common.session()
            try await session.withSession { connection, _ in try await body(connection) }
            await session.close()
        }
    }
}
