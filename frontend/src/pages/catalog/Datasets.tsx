// The datasets page (/datasets): the catalogue of datasets, each row's versions when expanded.
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { CatalogPage } from "./CatalogPage";
import { DatasetVersions } from "./DatasetVersions";

export function DatasetsPage() {
  const { t } = useI18n();
  return (
    <CatalogPage<Schemas["Dataset"]>
      kind="dataset"
      title="nav.datasets"
      empty="catalog.emptyDatasets"
      queryKey="datasets"
      fetch={async (project, archived) =>
        unwrap(
          await api.GET("/api/v1/datasets/", { params: { query: { project, page_size: 200, archived: archived || undefined } } }),
        ).results
      }
      expanded={(d) => <DatasetVersions id={d.id} latest={d.latest_version ?? 0} />}
      columns={[{ title: t("admin.description"), dataIndex: "description" }]}
    />
  );
}
