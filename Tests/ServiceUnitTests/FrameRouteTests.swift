@testable import GatewayService
import Testing
import WhisperShared

/// The gateway's table of frame routes against the protocol's frame types.
@Suite struct FrameRouteTests {
    @Test func everyFrameTypeHasARouteOfItsOwnPayloadAndSender() throws {
        for type in ClientFrameType.allCases {
            let route = try #require(FrameRoute.table[type], "\(type.rawValue) has no route")
            // Built from the payload type the decoder gives this frame type.
            #expect(route.type == type, "\(type.rawValue) is routed as \(route.type.rawValue)")
            // A session's frames are exactly the protocol's privileged ones.
            #expect((route.sender == .session) == type.isPrivileged, "\(type.rawValue)")
        }
        #expect(FrameRoute.table.count == ClientFrameType.allCases.count)
    }

    @Test func controlFramesAreTheOnesThatCostOnlyTime() {
        let control = Set(ClientFrameType.allCases.filter { FrameRoute.table[$0]?.isControl == true })
        #expect(control == [.ping, .sessionRefresh, .logout, .updateTokens])
    }
}
