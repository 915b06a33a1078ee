// EXPECT: tp rule \[input: dataflow state reachable\]
#include "common.hpp"
#include <range/v3/view/all.hpp>
#include <tp/data.hpp>
// A view whose base() returns a copy, above a shuffle: the shuffle's pass count could not be saved.
template <class Source>
struct Hiding : ranges::view_base {
  Source source;
  auto begin() { return ranges::begin(source); }
  auto end() { return ranges::end(source); }
  Source base() const { return source; }
};
int main() {
  std::vector<cf::Batch> items(4, cf::Batch{torch::zeros({2, 4}), torch::zeros({2, 1})});
  auto shuffled = ranges::views::all(items) | tp::data::shuffle(1);
  tp::FeedInput input(Hiding<decltype(shuffled)>{{}, std::move(shuffled)});
  (void)input;
}
