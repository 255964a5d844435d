@testable import GatewayService
import Testing

/// How long a gateway spreads its sockets' reconnects after its subscription came back
/// (`frames_missed`): as long as its sockets need at 2,000 a second, at most 5 s.
@Suite struct MissedFramesTests {
    @Test func theSpreadGrowsWithTheSocketsUpToFiveSeconds() {
        #expect(MissedFrames.spread(sockets: 0) == .zero)
        #expect(MissedFrames.spread(sockets: 20) == .milliseconds(10))
        #expect(MissedFrames.spread(sockets: 4_000) == .seconds(2))
        #expect(MissedFrames.spread(sockets: 100_000) == .seconds(5))
    }
}
