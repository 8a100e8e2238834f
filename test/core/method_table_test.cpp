// The server's method table: each method once, found by name, unknown names not found.
#include <gtest/gtest.h>

#include "runner/method_table.hpp"

namespace motor::runner {
namespace {

TEST(CoreMethodTable, FindsEachMethodByItsNameOnly) {
  MethodTable table;
  int hello = 0, status = 0;
  EXPECT_TRUE(table.add("runner.hello", [&](Session&, const protocol::Request&) { ++hello; }));
  EXPECT_TRUE(table.add("runner.status", [&](Session&, const protocol::Request&) { ++status; }));
  EXPECT_FALSE(table.add("runner.hello", [](Session&, const protocol::Request&) {})) << "a method is added once";
  EXPECT_EQ(table.size(), 2u);
  const protocol::Request r;
  alignas(16) unsigned char no_session[16] = {};  // the handlers here never touch their session
  Session& session = *reinterpret_cast<Session*>(no_session);
  ASSERT_NE(table.find("runner.hello"), nullptr);
  (*table.find("runner.hello"))(session, r);
  EXPECT_EQ(hello, 1);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(table.find("runner.hell"), nullptr);
  EXPECT_EQ(table.find("runner.hello "), nullptr);
  EXPECT_EQ(table.find("workspace."), nullptr);
  EXPECT_EQ(table.find(""), nullptr);
}

}  // namespace
}  // namespace motor::runner
