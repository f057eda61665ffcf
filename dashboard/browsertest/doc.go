// Package browsertest drives the dashboard in a real headless Chromium
// (chromedp): what an operator sees and clicks, over miniredis and, when
// REDIS_ADDR is set, a real server. It is its own module so that the core
// does not depend on chromedp.
//
// Chromium is /usr/bin/chromium (Debian's package) unless CHROMIUM names
// another binary. Without one the tests skip, or fail under
// REDEQ_REQUIRE_BROWSER (CI). DASHBOARD_SCREENSHOT=path saves a picture of
// a topic page there.
package browsertest
