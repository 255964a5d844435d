import Foundation
import Testing
import WhisperClient
import WhisperShared

/// `typing` between direct peers only (a message exchanged within 30 days), at most one
/// relayed per 2 s per (sender, peer), the rest dropped silently and counted.
@Suite(.serialized)
struct TypingTests {
    @Test func typingReachesADirectPeerAtMostOnceInTwoSecondsAndNeverAStranger() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 0)
            _ = try await alice.sendAndWaitForArrival("hello", to: bob)
            // One message that Bob took but did not answer makes no peers (issue 34, item 5):
            // Alice's typing is not relayed until Bob writes back.
            try await alice.connection.sendTyping(to: bob.whisperId, isTyping: true)
            _ = try await alice.connection.ping()
            try await waitUntil {
                Metrics.value(in: try await stack.metricsText(of: stack.gateways), "whisper_gateway_typing_total", ["outcome": "not_peer"]) == 1
            }
            #expect(await bob.events.all(.peerTyping).isEmpty)
            try await waitUntil { try await stack.withRedis { try await $0.send("EXISTS", "typing:{\(alice.whisperId)}:\(bob.whisperId)").int == 0 } }
            _ = try await bob.sendAndWaitForArrival("hi", to: alice)

            // Ten frames in well under a second: one arrives.
            for index in 0..<10 { try await alice.connection.sendTyping(to: bob.whisperId, isTyping: index % 2 == 0) }
            let first = try #require(try await bob.events(.peerTyping).first?.payload(as: PeerTyping.self))
            #expect(first.from == alice.whisperId)
            #expect(first.isTyping)
            // The way back works too: each wrote to the other, so they are peers.
            try await bob.connection.sendTyping(to: alice.whisperId, isTyping: true)
            let back = try #require(try await alice.events(.peerTyping).first?.payload(as: PeerTyping.self))
            #expect(back.from == bob.whisperId)

            // A stranger is never relayed, and nobody is answered.
            for _ in 0..<3 { try await carol.connection.sendTyping(to: bob.whisperId, isTyping: true) }
            _ = try await carol.connection.ping()
            _ = try await alice.connection.ping()
            try await waitUntil {
                let metrics = try await stack.metricsText(of: stack.gateways)
                // Alice's nine after her first, and Carol's two after hers (the pair's interval
                // is checked before the peer relation); Alice's before Bob answered, and Carol's.
                return Metrics.value(in: metrics, "whisper_gateway_typing_total", ["outcome": "throttled"]) == 11
                    && Metrics.value(in: metrics, "whisper_gateway_typing_total", ["outcome": "not_peer"]) == 2
                    && Metrics.value(in: metrics, "whisper_gateway_typing_total", ["outcome": "relayed"]) == 2
            }
            #expect(await bob.events.all(.peerTyping).count == 1)
            #expect(await carol.events.all(.error).isEmpty)
            #expect(await alice.events.all(.error).isEmpty)

            // After the interval, the next one goes through.
            try await waitUntil { try await stack.withRedis { try await $0.send("EXISTS", "typing:{\(alice.whisperId)}:\(bob.whisperId)").int == 0 } }
            try await alice.connection.sendTyping(to: bob.whisperId, isTyping: false)
            let later = try await bob.events(.peerTyping, count: 2)
            #expect(later.last?.payload(as: PeerTyping.self)?.isTyping == false)
        }
    }
}
