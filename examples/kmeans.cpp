// Mini-batch k-means (Sculley, 2010) through tp::Trainer: a training loop with no gradients
// and no optimizer. The "model" is a module holding the centroids as buffers; the step assigns
// a batch to its nearest centroids and moves each centroid toward its points with a rate of
// 1 / (points it has seen). The program checks that the centroids found the true centres.
#include <iostream>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

namespace {

const torch::Tensor true_centres = torch::tensor({{-4.0f, 0.0f}, {0.0f, 4.0f}, {4.0f, 0.0f}, {0.0f, -4.0f}});

struct KMeansImpl : torch::nn::Module {
  explicit KMeansImpl(std::int64_t k)
      : centroids(register_buffer("centroids", torch::zeros({k, 2}))), counts(register_buffer("counts", torch::zeros({k}))) {}
  torch::Tensor centroids, counts;
  bool initialised = false;

  // Farthest-first initialisation from one batch: deterministic, and one seed per blob when the
  // blobs are apart.
  void initialise(const torch::Tensor& points) {
    centroids[0] = points[0];
    for (std::int64_t c = 1; c < centroids.size(0); ++c) {
      auto distance = torch::cdist(points, centroids.slice(0, 0, c)).amin(1);
      centroids[c] = points[distance.argmax()];
    }
    initialised = true;
  }
  // Mean squared distance of the points to their nearest centroid.
  torch::Tensor inertia(const torch::Tensor& points) const { return torch::cdist(points, centroids).amin(1).pow(2).mean(); }
};
TORCH_MODULE(KMeans);

// Tells the mean inertia of the epoch's batches to the monitors.
struct Inertia {
  double sum = 0;
  std::int64_t batches = 0;
  void after_step(auto& t) {
    sum += t.last_cost().template item<double>();
    ++batches;
  }
  void after_epoch(auto& t) {
    t.put_scalar("inertia", sum / static_cast<double>(batches));
    sum = 0;
    batches = 0;
  }
};

}  // namespace

int main() try {
  torch::manual_seed(0);
  // 4000 points around four centres, served in shuffled batches of 100.
  auto labels = torch::randint(0, 4, {4000}, torch::kLong);
  auto points = true_centres.index_select(0, labels) + 0.7 * torch::randn({4000, 2});
  auto flow = tp::data::examples(points, labels) | tp::data::shuffle(1) | tp::data::batch(100);

  tp::Trainer trainer(tp::FeedInput(std::move(flow)), tp::model_desc([] { return KMeans(4); }), tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(40).max_epoch(5), tp::ProgressBar(), Inertia{},
                      tp::ScalarPrinter());
  trainer.train([](auto& t) {
    auto& km = *t.model();
    const auto x = t.input().next_batch().data;
    if (!km.initialised) km.initialise(x);
    const auto nearest = torch::cdist(x, km.centroids).argmin(1);
    for (std::int64_t c = 0; c < km.centroids.size(0); ++c) {
      const auto mine = x.index({nearest == c});
      if (mine.size(0) == 0) continue;
      km.counts[c] += mine.size(0);
      const auto rate = mine.size(0) / km.counts[c];
      km.centroids[c] += rate * (mine.mean(0) - km.centroids[c]);
    }
    return km.inertia(x);
  });

  // Each true centre must have a centroid close to it.
  const auto distance = torch::cdist(true_centres, trainer.model()->centroids).amin(1).max().item<double>();
  std::cout << "farthest true centre is " << distance << " from its centroid\n";
  if (distance > 0.15) {
    std::cerr << "kmeans: the centroids did not find the centres\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "kmeans: " << e.what() << "\n";
  return 1;
}
